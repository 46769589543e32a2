#include "transport/tcp/ring.h"

#include <algorithm>

#include "common/reduce.h"

namespace hvdlite::transport::tcp {
namespace {

// The two cursors of Note [Ring as one stream]. Outgoing segment 0 is
// plan.first; outgoing segment k >= 1 is incoming segment k-1.
class RingRun {
 public:
  RingRun(Link& right, Link& left, const RingPlan& plan)
      : right_(right),
        left_(left),
        plan_(plan),
        segments_(plan.incoming.size()),
        element_(dtypeSize(plan.dtype)) {}

  void run() {
    while (!sendDone() || !recvDone()) {
      size_t moved = trySend() + tryRecv();
      if (moved == 0) waitForEither(right_, sendReady(), left_, !recvDone());
    }
  }

 private:
  size_t outBytes(size_t k) const {
    return k == 0 ? plan_.first_bytes : plan_.incoming[k - 1].bytes;
  }
  const char* outData(size_t k) const { return k == 0 ? plan_.first : plan_.incoming[k - 1].dst; }
  // How much of outgoing segment k may leave now.
  size_t outReady(size_t k) const {
    if (k == 0 || k - 1 < in_segment_) return outBytes(k);
    return k - 1 == in_segment_ ? in_ready_ : 0;
  }

  bool sendDone() {
    while (out_segment_ < segments_ && out_sent_ == outBytes(out_segment_)) {
      ++out_segment_;
      out_sent_ = 0;
    }
    return out_segment_ == segments_;
  }
  bool recvDone() {
    while (in_segment_ < segments_ && in_ready_ == plan_.incoming[in_segment_].bytes) {
      ++in_segment_;
      in_ready_ = 0;
    }
    return in_segment_ == segments_;
  }
  bool sendReady() { return !sendDone() && out_sent_ < outReady(out_segment_); }

  size_t trySend() {
    if (!sendReady()) return 0;
    size_t n = right_.sendSome(outData(out_segment_) + out_sent_,
                               outReady(out_segment_) - out_sent_);
    out_sent_ += n;
    return n;
  }

  size_t tryRecv() {
    if (recvDone()) return 0;
    const RingPlan::Incoming& segment = plan_.incoming[in_segment_];
    if (segment.mine == nullptr) {
      size_t n = left_.recvSome(segment.dst + in_ready_, segment.bytes - in_ready_);
      in_ready_ += n;
      return n;
    }
    size_t want = std::min(plan_.piece_bytes, segment.bytes - in_ready_);
    size_t n = left_.recvSome(plan_.piece + piece_received_, want - piece_received_);
    piece_received_ += n;
    if (piece_received_ == want) {
      reduce3(segment.dst + in_ready_, segment.mine + in_ready_, plan_.piece, want / element_,
              plan_.dtype, plan_.op);
      in_ready_ += want;
      piece_received_ = 0;
    }
    return n;
  }

  Link& right_;
  Link& left_;
  const RingPlan& plan_;
  const size_t segments_;
  const size_t element_;
  size_t out_segment_ = 0, out_sent_ = 0;
  size_t in_segment_ = 0, in_ready_ = 0, piece_received_ = 0;
};

}  // namespace

void runRing(Link& right, Link& left, const RingPlan& plan) {
  HVD_CHECK(plan.piece_bytes % dtypeSize(plan.dtype) == 0 && plan.piece_bytes > 0,
            "ring piece of ", plan.piece_bytes, " bytes for ", dtypeName(plan.dtype));
  RingRun(right, left, plan).run();
}

}  // namespace hvdlite::transport::tcp
