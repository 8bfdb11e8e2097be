"""Alloy: Metal compute kernels, written as for MLX's ``mx.fast.metal_kernel``, on NVIDIA GPUs
(CUDA) and CPUs.

    import alloy, numpy as np
    kernel = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                source='''
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    ''')
    a = alloy.array(np.random.rand(4, 16).astype(np.float16))
    out = kernel(inputs=[a], template=[("T", alloy.float32)], grid=(a.size, 1, 1),
                 threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])[0]
    np.asarray(out)
"""

from ._core import (
    # arrays
    array,
    from_dlpack,
    eval,
    async_eval,
    zeros,
    full,
    arange,
    # dtypes
    Dtype,
    bool_,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    float16,
    bfloat16,
    float32,
    float64,
    complex64,
    # devices and streams
    Device,
    DeviceType,
    Stream,
    cpu,
    gpu,
    default_device,
    set_default_device,
    default_stream,
    new_stream,
    set_default_stream,
    is_available,
    synchronize,
    # kernels
    MetalKernel,
    metal_kernel,
    take_out_of_range_reports,
    robust_by_default,
    # errors
    KernelError,
    CompileError,
    NotSupportedError,
    # whole Metal libraries (torch.mps.compile_shader style)
    compile_shader,
    Library,
    LibraryKernel,
    CheckError,
    # exported functions (Alloy's format and MLX's .mlxfn)
    export_function,
    exporter,
    import_function,
    describe_exported_function,
    FunctionExporter,
    ImportedFunction,
    UntrustedKernelsError,
)
from . import cuda, fast

__version__ = "0.1.0"

__all__ = [
    "array", "from_dlpack", "eval", "async_eval", "zeros", "full", "arange",
    "Dtype", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64",
    "Device", "DeviceType", "Stream", "cpu", "gpu", "default_device", "set_default_device",
    "default_stream", "new_stream", "set_default_stream", "is_available", "synchronize",
    "MetalKernel", "metal_kernel", "take_out_of_range_reports", "robust_by_default",
    "KernelError", "CompileError", "NotSupportedError",
    "compile_shader", "Library", "LibraryKernel", "CheckError",
    "export_function", "exporter", "import_function", "describe_exported_function",
    "FunctionExporter", "ImportedFunction", "UntrustedKernelsError",
    "cuda", "fast",
]
