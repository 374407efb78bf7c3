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

/// What a GPU OOM message says the job was reaching when it died
/// (docs/BEHAVIOUR.md "Out of memory and timeouts"): the allocation that
/// failed and, where the framework says it, what the process already
/// held. A job that ramps between two samples dies far above its last
/// sampled peak; its own message says where it was going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// The allocation that failed (MiB, rounded up).
    pub tried_mib: u64,
    /// What the process held then, where the message says it (MiB,
    /// rounded up): PyTorch's "this process has X memory in use" (or,
    /// before 2.1, "X reserved in total by PyTorch"), CuPy's "allocated
    /// so far".
    pub held_mib: Option<u64>,
}

impl Reach {
    /// What the job was reaching (MiB), at least: what it held — said by
    /// the framework, else the last sampled `peak_mib`, else nothing —
    /// plus the failed allocation.
    pub fn reaching_mib(&self, peak_mib: Option<u64>) -> u64 {
        self.held_mib
            .or(peak_mib)
            .unwrap_or(0)
            .saturating_add(self.tried_mib)
    }
}

/// The sizes in the latest GPU out-of-memory line of `log_tail` that
/// names one ([`Reach`]); `None` when it names no size. The formats, from
/// each framework's source:
///
/// * PyTorch (c10/cuda/CUDACachingAllocator.cpp, `format_size`): "Tried
///   to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of
///   which 1.12 GiB is free. Including non-PyTorch memory, this process
///   has 22.50 GiB memory in use." — before 2.1 "(GPU 0; 7.79 GiB total
///   capacity; 6.42 GiB already allocated; 10.44 MiB free; 6.50 GiB
///   reserved in total by PyTorch)".
/// * JAX / XLA: "Out of memory while trying to allocate 17179869184
///   bytes."
/// * TensorFlow: "OOM when allocating tensor with shape[8192,8192] and
///   type float", and the BFC allocator's "ran out of memory trying to
///   allocate 4.00GiB (rounded to 4294967296)".
/// * CuPy: "Out of memory allocating 1,073,741,824 bytes (allocated so
///   far: 0 bytes)".
/// * llama.cpp / ggml: "allocating 7500.00 MiB on device 0: cudaMalloc
///   failed: out of memory".
pub fn reach(log_tail: &str) -> Option<Reach> {
    let line = log_tail
        .split(['\n', '\r'])
        .rev()
        .filter(|line| classify(line).is_some_and(|s| s.memory == Exhausted::Gpu))
        .find_map(reach_in_line)?;
    Some(line)
}

/// [`reach`] for one line.
fn reach_in_line(line: &str) -> Option<Reach> {
    const SIZE: &str = r"([0-9][0-9,]*(?:\.[0-9]+)?)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)";
    let capture = |pattern: &str| -> Option<u64> {
        let re = regex_lite::Regex::new(pattern).ok()?;
        let c = re.captures(line)?;
        mib_of(c.get(1)?.as_str(), c.get(2)?.as_str())
    };
    let tried = capture(&format!(r"(?i)tried to allocate {SIZE}"))
        .or_else(|| capture(r"(?i)rounded to ([0-9]+)\s*()\)"))
        .or_else(|| capture(&format!(r"(?i)trying to allocate {SIZE}")))
        .or_else(|| capture(&format!(r"(?i)out of memory allocating {SIZE}")))
        .or_else(|| capture(&format!(r"(?i)allocating {SIZE} on device")))
        .or_else(|| capture(&format!(r"(?i)cannot allocate {SIZE}")))
        .or_else(|| tensor_mib(line))?;
    let held = capture(&format!(r"(?i)this process has {SIZE} memory in use"))
        .or_else(|| capture(&format!(r"(?i){SIZE} reserved in total by pytorch")))
        .or_else(|| capture(&format!(r"(?i)allocated so far: {SIZE}")));
    Some(Reach {
        tried_mib: tried,
        held_mib: held,
    })
}

/// MiB (rounded up) of `number` `unit` (`2.00` `GiB`, `1,024` `bytes`;
/// an empty unit is bytes).
fn mib_of(number: &str, unit: &str) -> Option<u64> {
    let value: f64 = number.replace(',', "").parse().ok()?;
    let bytes_per = match unit {
        "" | "bytes" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    let mib = (value * bytes_per / (1024.0 * 1024.0)).ceil();
    (mib.is_finite() && mib >= 0.0).then_some(mib as u64)
}

/// TensorFlow's "OOM when allocating tensor with shape[a,b,…] and type
/// T": the tensor's size (MiB, rounded up) from its shape and the size
/// of T (`DataTypeString`: float 4, double 8, half/bfloat16 2, …).
fn tensor_mib(line: &str) -> Option<u64> {
    let re = regex_lite::Regex::new(r"shape\[([0-9, ]*)\] and type ([a-z0-9]+)").ok()?;
    let c = re.captures(line)?;
    let elements = c
        .get(1)?
        .as_str()
        .split(',')
        .map(|d| d.trim().parse::<u64>().ok())
        .try_fold(1u64, |n, d| n.checked_mul(d?))?;
    let size = match c.get(2)?.as_str() {
        "double" | "int64" | "uint64" | "complex64" => 8,
        "float" | "int32" | "uint32" => 4,
        "half" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" | "bool" => 1,
        "complex128" => 16,
        _ => return None,
    };
    Some(elements.checked_mul(size)?.div_ceil(1024 * 1024))
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

    #[test]
    fn each_framework_s_message_says_what_the_job_was_reaching() {
        let reach_of = |text: &str| reach(&format!("step 10\n{text}\n"));
        let pytorch = reach_of(GPU_MESSAGES[0]).unwrap();
        assert_eq!(pytorch.tried_mib, 2048);
        assert_eq!(pytorch.held_mib, None, "this message says no process total");
        let full = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 6.12 GiB is free. Including non-PyTorch memory, this process has 3.86 GiB memory in use. Of the allocated memory 3.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.";
        let full = reach_of(full).unwrap();
        assert_eq!((full.tried_mib, full.held_mib), (8192, Some(3953)));
        assert_eq!(full.reaching_mib(Some(3951)), 8192 + 3953);
        let old = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.42 GiB already allocated; 10.44 MiB free; 6.50 GiB reserved in total by PyTorch)";
        let old = reach_of(old).unwrap();
        assert_eq!((old.tried_mib, old.held_mib), (20, Some(6656)));
        let jax = reach_of(GPU_MESSAGES[6]).unwrap();
        assert_eq!((jax.tried_mib, jax.held_mib), (16384, None));
        assert_eq!(jax.reaching_mib(Some(1000)), 17384, "held: the last sample");
        assert_eq!(jax.reaching_mib(None), 16384, "at least what it tried");
        let tf = reach_of(GPU_MESSAGES[4]).unwrap();
        assert_eq!(tf.tried_mib, 256, "8192 x 8192 floats");
        let bfc = reach_of(GPU_MESSAGES[5]).unwrap();
        assert_eq!(bfc.tried_mib, 4096);
        let cupy = reach_of(GPU_MESSAGES[10]).unwrap();
        assert_eq!((cupy.tried_mib, cupy.held_mib), (1024, Some(0)));
        let ggml = reach_of(GPU_MESSAGES[11]).unwrap();
        assert_eq!(ggml.tried_mib, 7500);
        // No size, or host memory: nothing to read.
        assert_eq!(reach_of(GPU_MESSAGES[1]), None);
        assert_eq!(reach_of(HOST_MESSAGES[0]), None);
        // The latest line with a size decides.
        let two = format!("{}\n{}", GPU_MESSAGES[11], GPU_MESSAGES[6]);
        assert_eq!(reach(&two).unwrap().tried_mib, 16384);
    }
}
