//! Which memory a failed job ran out of, from its log's tail
//! (docs/BEHAVIOUR.md "Out of memory and timeouts"): one table of the
//! messages frameworks and libraries print, each row with its source.
//! GPU memory exhaustion is retried with a bigger declaration; host memory
//! exhaustion (Python's `MemoryError`, `std::bad_alloc`, the kernel's OOM
//! killer, a TensorFlow allocation on the CPU) is not a GPU OOM and gets
//! no VRAM raise. The latest matching line decides, since a job's last
//! error is what ended it.

/// Which memory ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// Device memory (VRAM): retried as an OOM.
    Gpu,
    /// Host memory: an ordinary failure.
    Host,
}

/// One message: every needle must appear in one line of the log (compared
/// lower-case).
#[derive(Debug)]
pub struct Signature {
    /// The lower-case pieces of the message.
    pub needles: &'static [&'static str],
    /// Which memory it means.
    pub memory: Exhausted,
    /// Who prints it, and where.
    pub source: &'static str,
}

const fn gpu(needles: &'static [&'static str], source: &'static str) -> Signature {
    Signature {
        needles,
        memory: Exhausted::Gpu,
        source,
    }
}

const fn host(needles: &'static [&'static str], source: &'static str) -> Signature {
    Signature {
        needles,
        memory: Exhausted::Host,
        source,
    }
}

/// The table, tried in order on each line: rows that narrow a GPU message
/// to the host come before it, the generic host messages last (a line
/// naming `OutOfMemoryError` is a framework's GPU error, not Python's
/// `MemoryError`).
pub const SIGNATURES: &[Signature] = &[
    host(
        &["oom when allocating tensor", "device:cpu"],
        "TensorFlow, ResourceExhaustedError for a tensor on the CPU (tensorflow/core/common_runtime)",
    ),
    gpu(
        &["cuda out of memory"],
        "PyTorch, CUDACachingAllocator: \"CUDA out of memory. Tried to allocate …\"",
    ),
    gpu(
        &["torch.outofmemoryerror"],
        "PyTorch ≥ 2.1, torch.OutOfMemoryError",
    ),
    gpu(
        &["cuda error: out of memory"],
        "PyTorch C10_CUDA_CHECK, the CUDA runtime's cudaGetErrorString",
    ),
    gpu(
        &["cuda_error_out_of_memory"],
        "CUDA driver API, CUresult CUDA_ERROR_OUT_OF_MEMORY (cuda.h)",
    ),
    gpu(
        &["cudaerrormemoryallocation"],
        "CUDA runtime API, cudaErrorMemoryAllocation (driver_types.h); CuPy's CUDARuntimeError",
    ),
    gpu(
        &["oom when allocating tensor"],
        "TensorFlow, ResourceExhaustedError: OOM when allocating tensor … device:GPU",
    ),
    gpu(
        &["allocator (gpu_", "ran out of memory"],
        "TensorFlow BFC allocator: \"Allocator (GPU_0_bfc) ran out of memory\"",
    ),
    gpu(
        &["resource_exhausted"],
        "XLA/JAX and TensorFlow status RESOURCE_EXHAUSTED: \"Out of memory while trying to allocate\"",
    ),
    gpu(
        &["cublas_status_alloc_failed"],
        "cuBLAS, cublasStatus_t (cublas_api.h)",
    ),
    gpu(
        &["cudnn_status_alloc_failed"],
        "cuDNN, cudnnStatus_t (cudnn.h)",
    ),
    gpu(
        &["cusolver_status_alloc_failed"],
        "cuSOLVER, cusolverStatus_t",
    ),
    gpu(
        &["cusparse_status_alloc_failed"],
        "cuSPARSE, cusparseStatus_t",
    ),
    gpu(&["cufft_alloc_failed"], "cuFFT, cufftResult"),
    gpu(
        &["cuda failure", "out of memory"],
        "NCCL CUDACHECK: \"Cuda failure 'out of memory'\" (src/include/checks.h)",
    ),
    gpu(
        &["cupy.cuda.memory.outofmemoryerror"],
        "CuPy memory pool (cupy/cuda/memory.pyx)",
    ),
    gpu(
        &["cudamalloc failed: out of memory"],
        "llama.cpp / ggml CUDA backend (ggml-cuda)",
    ),
    gpu(
        &["no available memory for the cache blocks"],
        "vLLM, KV cache sizing at engine start",
    ),
    gpu(
        &["out of memory error on gpu"],
        "PaddlePaddle allocator: \"Out of memory error on GPU %d\"",
    ),
    host(
        &["std::bad_alloc"],
        "C++ operator new (libstdc++: \"throwing an instance of 'std::bad_alloc'\")",
    ),
    host(&["memoryerror"], "Python's built-in MemoryError"),
    host(
        &["out of memory: killed process"],
        "the Linux OOM killer (mm/oom_kill.c)",
    ),
    host(
        &["cannot allocate memory"],
        "ENOMEM from the C library (strerror)",
    ),
];

/// The memory the latest out-of-memory line of `log_tail` names, with the
/// signature that matched; `None` when no line is one.
pub fn classify(log_tail: &str) -> Option<&'static Signature> {
    log_tail
        .split(['\n', '\r'])
        .rev()
        .filter(|line| !line.trim().is_empty())
        .find_map(|line| {
            let lower = line.to_ascii_lowercase();
            SIGNATURES
                .iter()
                .find(|s| s.needles.iter().all(|n| lower.contains(n)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real messages, one per framework or library the table names.
    const GPU_MESSAGES: &[&str] = &[
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.12 GiB is free.",
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA driver error: CUDA_ERROR_OUT_OF_MEMORY",
        "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out of memory",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        "W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 4.00GiB (rounded to 4294967296)",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "host:1234:1240 [0] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes).",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7500.00 MiB on device 0: cudaMalloc failed: out of memory",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 4.000000GB memory on GPU 0",
    ];

    const HOST_MESSAGES: &[&str] = &[
        "MemoryError: Unable to allocate 64.0 GiB for an array with shape (8589934592,) and data type float64",
        "terminate called after throwing an instance of 'std::bad_alloc'",
        "[ 1234.5678] Out of memory: Killed process 4321 (python) total-vm:90000000kB",
        "OSError: [Errno 12] Cannot allocate memory",
        "ResourceExhaustedError: OOM when allocating tensor with shape[100000,100000] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
    ];

    #[test]
    fn every_framework_s_gpu_oom_is_a_gpu_oom() {
        for message in GPU_MESSAGES {
            let found = classify(message).unwrap_or_else(|| panic!("not recognised: {message}"));
            assert_eq!(
                found.memory,
                Exhausted::Gpu,
                "{message} matched {}",
                found.source
            );
        }
    }

    #[test]
    fn host_memory_exhaustion_is_not_a_gpu_oom() {
        for message in HOST_MESSAGES {
            let found = classify(message).unwrap_or_else(|| panic!("not recognised: {message}"));
            assert_eq!(
                found.memory,
                Exhausted::Host,
                "{message} matched {}",
                found.source
            );
        }
    }

    #[test]
    fn the_latest_error_decides_and_other_lines_are_nothing() {
        let gpu_then_host = format!(
            "{}\nretrying on the CPU\n{}\n",
            GPU_MESSAGES[0], HOST_MESSAGES[0]
        );
        assert_eq!(classify(&gpu_then_host).unwrap().memory, Exhausted::Host);
        let host_then_gpu = format!("{}\r{}\r\n\n", HOST_MESSAGES[1], GPU_MESSAGES[6]);
        assert_eq!(classify(&host_then_gpu).unwrap().memory, Exhausted::Gpu);
        assert!(classify("Segmentation fault (core dumped)\nexit 139\n").is_none());
        assert!(classify("").is_none());
    }

    #[test]
    fn every_row_has_a_source_and_lower_case_needles() {
        for row in SIGNATURES {
            assert!(!row.source.is_empty() && !row.needles.is_empty());
            for needle in row.needles {
                assert_eq!(*needle, needle.to_ascii_lowercase(), "{needle}");
            }
            // Each row is reachable: a line of its own needles matches it
            // or a row before it that means the same memory.
            let line = row.needles.join(" ");
            assert_eq!(
                classify(&line).map(|s| s.memory),
                Some(row.memory),
                "{line}"
            );
        }
    }
}
