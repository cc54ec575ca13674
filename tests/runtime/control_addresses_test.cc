// Where rank 0's control socket listens (runtime/control/control_addresses.h).
#include "runtime/control/control_addresses.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace overlap {
namespace {

std::string Texts(const std::vector<Interface>& interfaces) { return EncodeInterfaces(interfaces); }

TEST_CASE("interfaces travel as text and back") {
  const std::vector<Interface> decoded =
      DecodeInterfaces("10.0.0.1/24,bad,127.0.0.1/8,1.2.3.4/40,192.168.1.9/32");
  CHECK(Texts(decoded) == "10.0.0.1/24,127.0.0.1/8,192.168.1.9/32");
  CHECK(decoded[1].loopback());
  CHECK_FALSE(decoded[0].loopback());
}

TEST_CASE("this machine has a loopback interface") {
  bool loopback = false;
  for (const Interface& i : LocalInterfaces()) loopback = loopback || i.loopback();
  CHECK(loopback);
}

TEST_CASE("a job on one host listens on loopback only") {
  const std::vector<Interface> own = DecodeInterfaces("10.0.0.1/24,172.17.0.1/16,127.0.0.1/8");
  CHECK(Texts(ChooseListenAddresses(own, {})) == "127.0.0.1/8");
}

TEST_CASE("a job across hosts listens on the subnets its hosts are on") {
  const std::vector<Interface> own = DecodeInterfaces("10.0.0.1/24,172.17.0.1/16,127.0.0.1/8");
  const std::vector<std::vector<Interface>> remote = {
      DecodeInterfaces("10.0.0.2/24,172.17.0.1/16,127.0.0.1/8"),
      DecodeInterfaces("10.0.0.3/24,127.0.0.1/8")};
  // 172.17.0.1 is each host's own container bridge, no route between them; loopback never is.
  CHECK(Texts(ChooseListenAddresses(own, remote)) == "10.0.0.1/24");
  const std::vector<std::vector<Interface>> bridged = {DecodeInterfaces("172.17.0.5/16")};
  CHECK(Texts(ChooseListenAddresses(own, bridged)) == "172.17.0.1/16");
}

TEST_CASE("hosts on routed subnets get every non-loopback address") {
  const std::vector<Interface> own = DecodeInterfaces("10.0.0.1/24,10.9.0.1/24,127.0.0.1/8");
  const std::vector<std::vector<Interface>> remote = {DecodeInterfaces("10.1.0.5/24")};
  CHECK(Texts(ChooseListenAddresses(own, remote)) == "10.0.0.1/24,10.9.0.1/24");
}

}  // namespace
}  // namespace overlap
