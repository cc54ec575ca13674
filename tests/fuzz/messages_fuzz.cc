// Fuzzes the negotiation messages rank 0 decodes from every rank and every rank decodes from rank
// 0 (runtime/negotiation/messages.h), and the matcher that compares decoded requests. The first byte picks the
// mode; the rest is the message. Whatever decodes must re-encode to bytes that decode to the same
// value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/negotiation/matcher.h"
#include "runtime/negotiation/messages.h"

namespace overlap {
namespace {

void RoundTripRequest(const Request& r) {
  ByteWriter out;
  EncodeRequest(r, &out);
  ByteReader in(out.bytes());
  Request again;
  if (!DecodeRequest(&in, &again).ok() || !in.done()) std::abort();
  // NaN scales compare unequal to themselves: compare the encodings instead.
  ByteWriter out2;
  EncodeRequest(again, &out2);
  if (out.bytes() != out2.bytes()) std::abort();
}

void RoundTripResponse(const Response& r) {
  ByteWriter out;
  EncodeResponse(r, &out);
  ByteReader in(out.bytes());
  Response again;
  if (!DecodeResponse(&in, &again).ok() || !in.done()) std::abort();
  ByteWriter out2;
  EncodeResponse(again, &out2);
  if (out.bytes() != out2.bytes()) std::abort();
}

}  // namespace
}  // namespace overlap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  ByteReader in(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  if (mode == 0) {
    Request r;
    if (DecodeRequest(&in, &r).ok()) {
      RoundTripRequest(r);
      for (const TensorMeta& t : r.tensors) (void)ShapeString(t.shape);
    }
  } else if (mode == 1) {
    Response r;
    if (DecodeResponse(&in, &r).ok()) RoundTripResponse(r);
  } else {
    // Rank 0's view of one name: up to four ranks' requests (a rank whose bytes do not decode
    // stands for a joined rank), compared by the matcher as the negotiator does.
    std::vector<std::optional<Request>> requests(4);
    std::vector<const Request*> view;
    for (size_t i = 0; i < requests.size(); ++i) {
      Request r;
      if (DecodeRequest(&in, &r).ok()) {
        // The negotiator only compares requests of one name.
        if (i > 0 && requests[0].has_value()) r.name = requests[0]->name;
        requests[i] = std::move(r);
      }
      view.push_back(requests[i].has_value() ? &*requests[i] : nullptr);
    }
    bool any = false;
    for (const Request* r : view) any = any || r != nullptr;
    if (any) {
      Response response = MatchRequests(view);
      if (response.error.empty()) RoundTripResponse(response);
    }
  }
  return 0;
}
