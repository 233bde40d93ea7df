"""benchmarks/profile_step.py: the categories of the kernel names an H200 profile shows (../shared/measurements), and
the ratios of a summary against original's, computed by hand."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import profile_step  # noqa: E402


@pytest.mark.parametrize(
    "name, expected",
    [
        ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align2", "matrix product"),
        ("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopB_TNT", "matrix product"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x64_4x1x1", "attention kernel"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        ("void at::native::elementwise_kernel<128, 2, BinaryFunctor<c10::BFloat16>>", "element-wise"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", "layer norm"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float>", "softmax / loss"),
        ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("triton_poi_fused_add_mul_0", "element-wise"),
        ("triton_red_fused_sum_1", "reduction"),
        ("aten::addmm", "matrix product"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention kernel"),
        ("aten::copy_", "copy / layout"),
        ("aten::mul", "element-wise"),
        ("aten::sum", "reduction"),
        ("Memcpy DtoD (Device -> Device)", "other"),
    ],
)
def test_kernel_categories(name, expected):
    assert profile_step.category(name) == expected


def test_summary_ratios_are_original_over_the_type():
    original = profile_step.summarise("original", {"aten::mm": (4, 6.0), "aten::mul": (2, 2.0)}, 300.0, None)
    shared = profile_step.summarise("shared", {"aten::mm": (2, 4.0), "aten::mul": (6, 2.4)}, 250.0, original)
    assert (original["ms_per_step"], original["vs_original"], original["flop_ratio"]) == (8.0, 1.0, 1.0)
    assert shared["ms_per_step"] == pytest.approx(6.4) and shared["vs_original"] == pytest.approx(8.0 / 6.4)
    assert shared["flop_ratio"] == pytest.approx(1.2)
    assert shared["categories"] == pytest.approx({"matrix product": 4.0, "element-wise": 2.4})
    assert [event["name"] for event in shared["top"]] == ["aten::mm", "aten::mul"]
