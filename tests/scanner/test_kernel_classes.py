"""The kernel class rules against real kernel names (H100 traces of PyTorch training, cuBLAS, cuDNN, NCCL, bnb)."""

import pytest

from scanner.kernel_classes import CLASSES, classify

# Names as H100 chrome traces of PyTorch 2.x training show them (cuBLAS 12/13 nvjet and sm90 xmma matmuls,
# PyTorch's flash and memory-efficient attention, cuDNN's SDPA graphs, NCCL, ATen's elementwise, reduction,
# copy and fused-optimizer kernels, bitsandbytes' 4-bit kernels, Triton kernels of torch.compile and Liger).
REAL = [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "gemm"),
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_TNN", "gemm"),
    ("nvjet_tst_64x16_64x16_2x1_v_bz_splitK_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>"
     "(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, "
     "__nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
     "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
     "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float>, float, float)", "gemm"),
    ("void kgemm_4bit_inference_naive<__nv_bfloat16, 128, 16>(int, int, int, __nv_bfloat16*, unsigned char*, "
     "float*, float const*, __nv_bfloat16*, int, int, int, int)", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, "
     "false, true, false, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, "
     "4, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> >, true, "
     "false, false, true, false, false>(pytorch_flash::Flash_bwd_params)", "attention"),
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, "
     "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> > >"
     "(pytorch_flash::Flash_bwd_params)", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 128, 64, true, true>::Params)", "attention"),
    ("fmha_cutlassB_bf16_aligned_128x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::"
     "Sm80, cutlass::bfloat16_t, true, false, true, 128, 64, 64, false>::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, bool, float const*, float const*>"
     "(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
     "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, "
     "bool, float const*, float const*)", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<c10::BFloat16, "
     "(at::native::NormType)1, float, float>, float*, int*>(at::native::(anonymous namespace)::"
     "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<c10::BFloat16, "
     "(at::native::NormType)1, float, float>, float*, int*)", "reduction"),
    ("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(float const*, "
     "at::native::TensorListAddresses, int)", "reduction"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
     "float, float>, unsigned int, c10::BFloat16, 4, 4>)", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
     "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", "reduction"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
     "float*, float const*, long const*, float const*, bool, long, long, long, long)", "reduction"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", "norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<c10::BFloat16, float, false>(long, long, "
     "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)",
     "norm"),
    ("_rms_norm_forward_kernel", "norm"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}, "
     "at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
     "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
     "operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, "
     "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
     "at::native::memory::StoreWithCast<1>)", "copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)"
     "::OpaqueType<2u>, unsigned int, 4, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::"
     "(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned "
     "int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
     "copy"),
    ("void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::"
     "TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
     "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
     "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::"
     "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
     "at::detail::Array<char*, 2> >(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
     "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
     "elementwise"),
    ("void kDequantizeBlockwise<__nv_bfloat16, 512, 64, 8, 2>(float*, unsigned char*, float*, __nv_bfloat16*, int, "
     "int)", "elementwise"),
    ("triton_poi_fused_mul_silu_2", "elementwise"),
]


@pytest.mark.parametrize("name, expected", REAL, ids=[f"{e}:{n[:40]}" for n, e in REAL])
def test_real_kernel_names_fall_in_their_class(name, expected):
    assert classify(name) == expected


def test_copies_by_the_copy_engine_are_host_transfers_or_device_copies():
    assert classify("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "transfer"
    assert classify("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy") == "transfer"
    assert classify("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == "copy"
    assert classify("Memset (Device)", "gpu_memset") == "copy"


def test_an_unknown_name_is_other_and_every_class_is_declared():
    assert classify("my_own_custom_thing") == "other"
    assert {expected for _, expected in REAL} | {"transfer", "other"} == set(CLASSES)
