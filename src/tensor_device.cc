// Device names and the one device check of the public entry points (burst/tensor.h).
#include <string>

#include "burst/error.h"
#include "burst/tensor.h"

namespace burst {

std::string to_string(const Device& device) {
  return device.kind == DeviceKind::Host ? std::string("host") : "cuda:" + std::to_string(device.index);
}

Device parse_device(const std::string& name) {
  if (name == "host" || name == "cpu") return kHost;
  if (name == "cuda") return {DeviceKind::Cuda, 0};
  const std::string prefix = "cuda:";
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
    const std::string digits = name.substr(prefix.size());
    BURST_CHECK(digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos,
                InvalidArgument, "device '", name, "': the CUDA device index must be a number 0..9999");
    return {DeviceKind::Cuda, std::stoi(digits)};
  }
  BURST_FAIL(InvalidArgument, "device '", name,
             "' is not one burst knows: expected host (cpu), cuda or cuda:<n>");
}

void check_device(const char* api, const Device& runs_on, const char* name, const TensorView& view) {
  BURST_CHECK(view.data == nullptr || view.device == runs_on, InvalidArgument, api, ": ", name, " is on ",
              to_string(view.device), ", but this call runs on ", to_string(runs_on),
              "; move it there first");
}

}  // namespace burst
