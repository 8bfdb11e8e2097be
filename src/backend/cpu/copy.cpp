// CPU evaluation of the core's moves (Copy, AsType, ToDevice): copy_convert_host
// (src/core/copy_convert.cpp) over the source's strides, or a device-to-host copy.
#include <cstring>

#include "core/array_node.h"
#include "core/backend.h"
#include "core/primitives.h"

namespace alloy {
void Copy::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  copy_convert_host(node_of(in)->data(), in.shape(), in.strides(), in.dtype(),
                    node_of(outputs[0])->data(), in.dtype());
}

void AsType::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  copy_convert_host(node_of(in)->data(), in.shape(), in.strides(), in.dtype(),
                    node_of(outputs[0])->data(), dtype_);
}

void ToDevice::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  size_t n = outputs[0].nbytes();
  if (n == 0) return;
  if (in.device().type == Device::Type::gpu)
    backend(in.device()).copy_to_host(node_of(outputs[0])->data(), node_of(in)->data(), n);
  else
    std::memcpy(node_of(outputs[0])->data(), node_of(in)->data(), n);
}

}  // namespace alloy
