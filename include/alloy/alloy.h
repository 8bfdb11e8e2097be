// Alloy: Metal compute kernels on NVIDIA GPUs and CPUs. Include this header for the whole API.
#pragma once
#include "alloy/array.h"
#include "alloy/device.h"
#include "alloy/dtype.h"
#include "alloy/errors.h"
#include "alloy/export.h"
#include "alloy/interrupt.h"
#include "alloy/kernel.h"
#include "alloy/library.h"
#include "alloy/ops.h"
#include "alloy/stream.h"
#include "alloy/transforms.h"
#include "alloy/translate.h"
