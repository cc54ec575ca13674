// Where rank 0's control socket listens (control_plane.h): only on the addresses the job's ranks
// use to reach it, never on every interface.
//
// Every rank reports its IPv4 interfaces to rank 0. A job whose ranks all share rank 0's network
// (same host name, same interfaces) listens on loopback only. Otherwise rank 0 listens on its
// non-loopback addresses whose subnet holds an address of a rank elsewhere (not the same address:
// a container bridge every host has is no route between them); when none does (the hosts are
// routed to each other), on all its non-loopback addresses.
//
// Threading: pure functions, except LocalInterfaces, which reads the kernel's table.
#ifndef OVERLAP_RUNTIME_CONTROL_CONTROL_ADDRESSES_H_
#define OVERLAP_RUNTIME_CONTROL_CONTROL_ADDRESSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace overlap {

struct Interface {
  uint32_t address = 0;  // host byte order
  int prefix = 32;       // the subnet's prefix length

  bool loopback() const { return (address >> 24) == 127; }
  std::string Text() const;  // dotted quad, no prefix
  bool operator==(const Interface& other) const {
    return address == other.address && prefix == other.prefix;
  }
};

// This network namespace's IPv4 interfaces, non-loopback first (in the kernel's order).
std::vector<Interface> LocalInterfaces();

// "a.b.c.d/p,..." and back; Decode skips entries it cannot parse.
std::string EncodeInterfaces(const std::vector<Interface>& interfaces);
std::vector<Interface> DecodeInterfaces(absl::string_view text);

// The addresses rank 0 listens on, given its own interfaces and those of every rank on another
// host (`remote`, one list per rank; empty when every rank shares rank 0's network). Never
// empty when `own` is not.
std::vector<Interface> ChooseListenAddresses(const std::vector<Interface>& own,
                                             const std::vector<std::vector<Interface>>& remote);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_CONTROL_ADDRESSES_H_
