// Placeholder until the tiled kernel lands (issue 2): every call throws Unsupported.
#include "burst/error.h"
#include "kernels/kernels.h"

namespace burst::kernels {
void forward_tiled(const Problem&, const ForwardIO&) { BURST_FAIL(Unsupported, "tiled kernel not built yet"); }
void backward_tiled(const Problem&, const BackwardIO&) { BURST_FAIL(Unsupported, "tiled kernel not built yet"); }
}  // namespace burst::kernels
