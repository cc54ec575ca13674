#include "runtime/control/control_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace overlap {
namespace {

uint32_t Mask(int prefix) {
  return prefix <= 0 ? 0 : (prefix >= 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1));
}

int PrefixOf(uint32_t mask) {
  int prefix = 0;
  while (prefix < 32 && (mask & (0x80000000u >> prefix)) != 0) ++prefix;
  return prefix;
}

}  // namespace

std::string Interface::Text() const {
  in_addr a{htonl(address)};
  char text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

std::vector<Interface> LocalInterfaces() {
  std::vector<Interface> external, loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
      Interface i;
      i.address = ntohl(reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr);
      if (it->ifa_netmask != nullptr) {
        i.prefix =
            PrefixOf(ntohl(reinterpret_cast<sockaddr_in*>(it->ifa_netmask)->sin_addr.s_addr));
      }
      (i.loopback() ? loopback : external).push_back(i);
    }
    freeifaddrs(list);
  }
  external.insert(external.end(), loopback.begin(), loopback.end());
  return external;
}

std::string EncodeInterfaces(const std::vector<Interface>& interfaces) {
  return absl::StrJoin(interfaces, ",", [](std::string* out, const Interface& i) {
    absl::StrAppend(out, i.Text(), "/", i.prefix);
  });
}

std::vector<Interface> DecodeInterfaces(absl::string_view text) {
  std::vector<Interface> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> parts = absl::StrSplit(entry, '/');
    in_addr a{};
    Interface i;
    if (inet_pton(AF_INET, parts.first.c_str(), &a) != 1 ||
        !absl::SimpleAtoi(parts.second, &i.prefix) || i.prefix < 0 || i.prefix > 32) {
      continue;
    }
    i.address = ntohl(a.s_addr);
    out.push_back(i);
  }
  return out;
}

std::vector<Interface> ChooseListenAddresses(const std::vector<Interface>& own,
                                             const std::vector<std::vector<Interface>>& remote) {
  std::vector<Interface> loopback, external, shared;
  for (const Interface& i : own) (i.loopback() ? loopback : external).push_back(i);
  if (remote.empty()) return loopback.empty() ? own : loopback;
  for (const Interface& mine : external) {
    const uint32_t mask = Mask(mine.prefix);
    bool used = false;
    for (const std::vector<Interface>& theirs : remote) {
      for (const Interface& other : theirs) {
        // An address both hosts have (a container bridge's, say) is no route between them.
        used = used || (!other.loopback() && other.address != mine.address &&
                        (other.address & mask) == (mine.address & mask));
      }
    }
    if (used) shared.push_back(mine);
  }
  if (!shared.empty()) return shared;
  return external.empty() ? own : external;
}

}  // namespace overlap
