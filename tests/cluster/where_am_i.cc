// Prints, for every rank, the hostname, the IPv4 addresses of its network namespace and the network
// namespace inode, then checks with one MPI_Allreduce that the ranks can talk. Used to prove that a
// namespace cluster (tools/cluster/cluster.sh) really places ranks on distinct hosts: the test
// compares the printed namespaces and addresses.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace {

std::string Ipv4Addresses() {
  std::string out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return "?";
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    char buf[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) == nullptr) {
      continue;
    }
    if (std::string(buf) == "127.0.0.1") {
      continue;
    }
    if (!out.empty()) {
      out += ",";
    }
    out += buf;
  }
  freeifaddrs(list);
  return out.empty() ? "none" : out;
}

uint64_t NetNamespaceInode() {
  struct stat st {};
  return stat("/proc/self/ns/net", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  std::printf("rank=%d size=%d host=%s ipv4=%s netns=%llu allreduce=%d\n", rank, size, host,
              Ipv4Addresses().c_str(), static_cast<unsigned long long>(NetNamespaceInode()), sum);
  std::fflush(stdout);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
