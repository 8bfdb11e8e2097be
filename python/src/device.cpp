// Devices and streams, as MLX spells them: alloy.cpu / alloy.gpu (DeviceType), alloy.Device,
// alloy.Stream, default_device(), set_default_device().
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"

namespace alloy::python {

namespace {
// alloy.cpu / alloy.gpu (enum members), compared by identity on the call path.
PyObject* g_cpu = nullptr;
PyObject* g_gpu = nullptr;
}  // namespace

std::optional<Device> to_device(nb::handle h, const char* what) {
  if (h.is_none()) return std::nullopt;
  if (h.ptr() == g_cpu) return Device::cpu();
  if (h.ptr() == g_gpu) return Device::gpu();
  if (nb::isinstance<Device>(h)) return nb::cast<Device>(h);
  if (nb::isinstance<Stream>(h)) return nb::cast<Stream>(h).device;
  Device::Type t;
  if (nb::try_cast<Device::Type>(h, t, /*convert=*/false)) return Device(t);
  throw nb::type_error((std::string("expected `") + what +
                        "` to be None, an alloy.Device, alloy.cpu / alloy.gpu or an alloy.Stream, "
                        "got " +
                        nb::inst_name(h).c_str())
                           .c_str());
}

std::optional<Stream> to_stream(nb::handle h, const char* what) {
  if (h.is_none()) return std::nullopt;
  if (h.ptr() == g_cpu) return default_stream(Device::cpu());  // the call path's usual values
  if (h.ptr() == g_gpu) return default_stream(Device::gpu());
  if (nb::isinstance<Stream>(h)) return nb::cast<Stream>(h);
  std::optional<Device> d = to_device(h, what);
  if (!d) return std::nullopt;
  return default_stream(*d);
}

namespace {
std::string type_name(Device::Type t) {
  return t == Device::Type::cpu ? "cpu" : "gpu";
}
}  // namespace

void init_device(nb::module_& m) {
  nb::enum_<Device::Type>(m, "DeviceType",
                          "Kind of device: alloy.cpu, or alloy.gpu (an NVIDIA GPU through CUDA).")
      .value("cpu", Device::Type::cpu)
      .value("gpu", Device::Type::gpu)
      .export_values();
  g_cpu = nb::cast(Device::Type::cpu).release().ptr();  // kept for the process
  g_gpu = nb::cast(Device::Type::gpu).release().ptr();

  nb::class_<Device>(m, "Device", "A device: its type (alloy.cpu / alloy.gpu) and index.")
      .def(nb::init<Device::Type, int>(), nb::arg("type"), nb::arg("index") = 0,
           "A device of `type` (alloy.cpu or alloy.gpu) and `index`: GPU i is device i of those "
           "CUDA shows (alloy.gpu_count()); alloy.gpu stands for GPU 0.")
      .def_ro("type", &Device::type, "alloy.cpu or alloy.gpu.")
      .def_ro("index", &Device::index, "Index among the devices of that type.")
      .def("__repr__",
           [](const Device& d) {
             return "Device(" + type_name(d.type) + ", " + std::to_string(d.index) + ")";
           })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__eq__", [](const Device& a, Device::Type t) { return a.type == t; })
      .def("__eq__", [](const Device&, nb::handle) { return false; })
      .def("__hash__", [](const Device& d) { return static_cast<int>(d.type) * 1024 + d.index; });
  nb::implicitly_convertible<Device::Type, Device>();

  nb::class_<Stream>(m, "Stream",
                     "A queue of work on a device (MLX's Stream). Work on one stream runs in "
                     "order; streams overlap, ordered by the arrays they share. CPU streams run "
                     "work handed to them by async_eval() on their own worker thread; GPU streams "
                     "are CUDA streams.")
      .def(
          "__init__",
          [](Stream* s, nb::handle device) {
            new (s) Stream(default_stream(*to_device(device, "device")));
          },
          nb::arg("device"), nb::sig("def __init__(self, device: Device | DeviceType) -> None"),
          "The default stream of `device` (alloy.new_stream(device) makes a new one).")
      .def_ro("device", &Stream::device, "The device the stream runs on.")
      .def_ro("index", &Stream::index, "Index of the stream (unique in the process).")
      .def("__repr__",
           [](const Stream& s) {
             return "Stream(Device(" + type_name(s.device.type) + ", " +
                    std::to_string(s.device.index) + "), " + std::to_string(s.index) + ")";
           })
      .def("__eq__", [](const Stream& a, const Stream& b) { return a == b; })
      .def("__eq__", [](const Stream&, nb::handle) { return false; })
      .def("__hash__", [](const Stream& s) { return s.index; });

  m.def("default_device", &default_device,
        "The default device: the GPU when a CUDA driver and GPU were found, else the CPU, unless "
        "set_default_device() chose otherwise.");
  m.def(
      "set_default_device", [](nb::handle d) { set_default_device(*to_device(d, "device")); },
      nb::arg("device"), nb::sig("def set_default_device(device: Device | DeviceType) -> None"),
      "Sets the default device (alloy.cpu, alloy.gpu or an alloy.Device). Raises ValueError for a "
      "GPU when none is available.");
  m.def(
      "default_stream", [](nb::handle d) { return default_stream(*to_device(d, "device")); },
      nb::arg("device"), nb::sig("def default_stream(device: Device | DeviceType) -> Stream"),
      "The default stream of `device`.");
  m.def(
      "new_stream", [](nb::handle d) { return new_stream(*to_device(d, "device")); },
      nb::arg("device"), nb::sig("def new_stream(device: Device | DeviceType) -> Stream"),
      "A new stream on `device`.");
  m.def("set_default_stream", &set_default_stream, nb::arg("stream"),
        "Makes `stream` the default stream of its device.");
  m.def(
      "is_available",
      [](nb::handle d) {
        Device dev = *to_device(d, "device");
        if (dev.type == Device::Type::cpu) return dev.index == 0;
        return gpu_available() && dev.index >= 0 && dev.index < gpu_count();
      },
      nb::arg("device"), nb::sig("def is_available(device: Device | DeviceType) -> bool"),
      "Whether `device` can be used: the CPU always, GPU i when a CUDA driver was found and CUDA "
      "shows more than i GPUs (alloy.cuda.device_count()).");
  m.def(
      "synchronize",
      [](nb::handle d) {
        if (nb::isinstance<Stream>(d)) {
          Stream s = nb::cast<Stream>(d);
          nb::gil_scoped_release release;
          synchronize(s);
          return;
        }
        std::optional<Device> dev = to_device(d);
        nb::gil_scoped_release release;
        synchronize(dev);
      },
      nb::arg("stream") = nb::none(),
      nb::sig("def synchronize(stream: Stream | Device | DeviceType | None = None) -> None"),
      "Waits until the work on `stream` (a Stream), or on every stream of a device (default: the "
      "default device), has finished. Raises the error of queued work that failed (e.g. "
      "alloy.KernelError), once.");
  // At exit, before the interpreter finalizes: work queued on CPU streams runs to its end on
  // their worker threads, so that what it releases (imported NumPy/PyTorch memory, Python
  // reference callables) goes while those threads can still take the GIL (delete_with_gil leaves
  // what goes later to the process's end). Its errors are not raised any more. GPU work releases
  // its inputs on the thread that launched it.
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] {
    nb::gil_scoped_release release;
    try {
      synchronize(Device::cpu());
    } catch (...) {
    }
  }));
}

}  // namespace alloy::python
