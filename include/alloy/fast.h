// MLX's mx.fast transformer ops with MLX's names and signatures (src/ops/fast.cpp): each is one
// primitive with state (RMSNorm, LayerNorm, RoPE, ScaledDotProductAttention, named as MLX's, so
// MLX's .mlxfn rows map onto them and Alloy's own export records them) whose kernel is generated
// Metal text run through the metal_kernel machinery on the CPU or the GPU. Results follow MLX's
// fallback definitions (the compositions mlx[cpu] records), computed in float32 (float64 inputs
// in float64). docs/fast.md lists what each supports and its gradients.
#pragma once
#include <optional>
#include <string>

#include "alloy/array.h"
#include "alloy/stream.h"

namespace alloy::fast {

/// x * rsqrt(mean(x^2, -1) + eps) * weight over the last axis. `weight`: shape (x.shape[-1]) or
/// none. The output dtype is x's promoted with weight's (floating).
Array rms_norm(const Array& x, const std::optional<Array>& weight, float eps,
               StreamOrDevice s = {});

/// (x - mean) * rsqrt(var + eps) * weight + bias over the last axis (weight, bias optional).
Array layer_norm(const Array& x, const std::optional<Array>& weight,
                 const std::optional<Array>& bias, float eps, StreamOrDevice s = {});

/// Rotary position embedding of the first `dims` features of the last axis (x has at least 3
/// axes; positions along axis -2 start at `offset`, a scalar or one per batch entry). Rotation
/// frequencies base^(-2i/dims), or 1/freqs (one of base and freqs). `traditional`: rotate
/// adjacent pairs (x[2i], x[2i+1]) instead of (x[i], x[i + dims/2]).
Array rope(const Array& x, int dims, bool traditional, std::optional<float> base, float scale,
           int offset, const std::optional<Array>& freqs = std::nullopt, StreamOrDevice s = {});
Array rope(const Array& x, int dims, bool traditional, std::optional<float> base, float scale,
           const Array& offset, const std::optional<Array>& freqs = std::nullopt,
           StreamOrDevice s = {});

/// softmax(scale * queries @ keys^T + mask) @ values, over (B, heads, L, D) arrays; keys/values
/// may have fewer heads (grouped-query attention: heads a multiple of theirs). `mask_mode`: ""
/// (none, or `mask_arr` given), "causal" (query i sees keys j <= i + Lk - Lq) or "array"; a bool
/// mask keeps the True positions, another dtype is added to the scores. `sinks`: one logit per
/// query head that joins each softmax without a value.
Array scaled_dot_product_attention(const Array& queries, const Array& keys, const Array& values,
                                   float scale, const std::string& mask_mode = "",
                                   std::optional<Array> mask_arr = std::nullopt,
                                   const std::optional<Array>& sinks = std::nullopt,
                                   StreamOrDevice s = {});

}  // namespace alloy::fast
