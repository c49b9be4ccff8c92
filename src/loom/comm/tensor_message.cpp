#include "loom/comm/tensor_message.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

// A tensor's header: element type, dimension count, the sizes (up to kMaxDims), the label, the
// device type the bytes travel on (kCPU: host memory), the note.
constexpr int64_t kMaxDims = 8;
constexpr int64_t kLabelAt = 2 + kMaxDims;
constexpr int64_t kBytesDeviceAt = kLabelAt + std::tuple_size_v<MessageLabel>;
constexpr int64_t kNoteAt = kBytesDeviceAt + 1;
constexpr int64_t kHeaderLength = kNoteAt + 1;

void wait(Communicator& comm, const WorkPtr& work) { work->wait(comm.options().timeout); }

}  // namespace

void PendingSends::wait_all(std::chrono::milliseconds timeout) {
  for (auto& [work, tensor] : sends_) work->wait(timeout);
  sends_.clear();
}

void send_tensor(Communicator& comm, const at::Tensor& tensor, int peer, PendingSends& pending,
                 const MessageHeader& message, Bytes bytes) {
  if (tensor.dim() > kMaxDims) {
    throw CommError("send to rank " + std::to_string(peer) + ": a tensor of " +
                    std::to_string(tensor.dim()) + " dimensions (at most 8 can be sent)");
  }
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  auto* h = header.data_ptr<int64_t>();
  h[0] = static_cast<int64_t>(tensor.scalar_type());
  h[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) h[2 + d] = tensor.size(d);
  std::copy(message.label.begin(), message.label.end(), h + kLabelAt);
  const bool on_device = bytes == Bytes::kOnTheirDevice && !tensor.device().is_cpu();
  h[kBytesDeviceAt] = static_cast<int64_t>(on_device ? tensor.device().type() : c10::kCPU);
  h[kNoteAt] = message.note;
  pending.add(comm.send(header, peer), header);
  if (tensor.numel() == 0) return;
  // A device's tensor is queued on its backend as it stands (its values may still be computing:
  // the backend orders the send after them); through the host it is copied there first.
  at::Tensor data =
      on_device ? tensor.detach().contiguous() : tensor.detach().to(at::kCPU).contiguous();
  pending.add(comm.send(data, peer), data);
}

at::Tensor recv_tensor(Communicator& comm, int peer,
                       const std::function<void(const MessageHeader&)>& on_header,
                       c10::Device device) {
  at::Tensor header = at::empty({kHeaderLength}, at::kLong);
  wait(comm, comm.recv(header, peer));
  const auto* h = header.data_ptr<int64_t>();
  const bool known_type = h[0] >= 0 && h[0] < static_cast<int64_t>(at::ScalarType::NumOptions);
  const bool known_device =
      h[kBytesDeviceAt] >= 0 &&
      h[kBytesDeviceAt] < static_cast<int64_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
  bool sizes_ok = h[1] >= 0 && h[1] <= kMaxDims;
  for (int64_t d = 0; sizes_ok && d < h[1]; ++d) sizes_ok = h[2 + d] >= 0;
  if (!known_type || !known_device || !sizes_ok) {
    throw CommError("malformed tensor header from rank " + std::to_string(peer) + " (rank " +
                    std::to_string(comm.rank()) + ")");
  }
  if (on_header) {
    MessageHeader message;
    std::copy(h + kLabelAt, h + kBytesDeviceAt, message.label.begin());
    message.note = h[kNoteAt];
    on_header(message);
  }
  const std::vector<int64_t> sizes(h + 2, h + 2 + h[1]);
  const auto sent_on = static_cast<c10::DeviceType>(h[kBytesDeviceAt]);
  const bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
  // Bytes that crossed the host land there; an empty tensor has none and stays there too.
  c10::Device lands_on = c10::kCPU;
  if (sent_on != c10::kCPU && !empty) {
    if (device.type() != sent_on) {
      throw CommError("rank " + std::to_string(peer) + " sends a tensor on its " +
                          c10::DeviceTypeName(sent_on, true) + " device, and rank " +
                          std::to_string(comm.rank()) + " receives on " + device.str(),
                      {{"problem", "device"}});
    }
    lands_on = device;
  }
  at::Tensor data = at::empty(
      sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])).device(lands_on));
  if (!empty) wait(comm, comm.recv(data, peer));
  return data;
}

void send_named_tensors(Communicator& comm, const NamedTensorList& tensors, int peer,
                        PendingSends& pending) {
  send_tensor(comm, at::tensor({static_cast<int64_t>(tensors.size())}, at::kLong), peer, pending);
  for (const auto& [name, tensor] : tensors) {
    at::Tensor bytes = at::empty({static_cast<int64_t>(name.size())}, at::kByte);
    std::memcpy(bytes.data_ptr<uint8_t>(), name.data(), name.size());
    send_tensor(comm, bytes, peer, pending);
    send_tensor(comm, tensor, peer, pending);
  }
}

NamedTensorList recv_named_tensors(Communicator& comm, int peer) {
  const at::Tensor count = recv_tensor(comm, peer);
  if (count.scalar_type() != at::kLong || count.numel() != 1 || count.item<int64_t>() < 0) {
    throw CommError("malformed named-tensor count from rank " + std::to_string(peer));
  }
  NamedTensorList out;
  for (int64_t i = 0; i < count.item<int64_t>(); ++i) {
    const at::Tensor bytes = recv_tensor(comm, peer);
    if (bytes.scalar_type() != at::kByte || bytes.dim() != 1) {
      throw CommError("malformed tensor name from rank " + std::to_string(peer));
    }
    std::string name(static_cast<size_t>(bytes.numel()), '\0');
    if (!name.empty()) std::memcpy(name.data(), bytes.data_ptr<uint8_t>(), name.size());
    out.emplace_back(std::move(name), recv_tensor(comm, peer));
  }
  return out;
}

}  // namespace loom::comm
