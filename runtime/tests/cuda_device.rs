//! The device layer on a real GPU. Every test first checks for a driver and a device and, when
//! there is none (CI), prints `SKIPPED (no GPU): <reason>` and returns: reported as not run,
//! never as a pass of GPU behaviour. Run on the H200 host by runtime/gpu/h200-run.sh.
#![cfg(feature = "cuda")]

use std::ffi::c_void;

use cudarc::driver::sys;
use tether_runtime::cuda::{
    Context, CudaError, DevicePtr, Graph, KernelImage, Module, ModuleSource, PinnedBuffer, Stream,
    SyncPolicy, skip_reason,
};

// The detection family's images also hold `add_one_u32(unsigned* p, int n)`, a test kernel.
static IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "detect.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../../families/detect/kernels/bin/detect.cu13.fatbin"),
    },
    KernelImage {
        name: "detect.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../../families/detect/kernels/bin/detect.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "detect.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../../families/detect/kernels/bin/detect.cu12.sm_90.cubin"),
    },
];

/// Say loudly that a GPU test did not run: written straight to the process's stderr, which
/// libtest does not capture (it captures only the `print!` family), so CI logs show it even
/// though the test is counted as passed.
fn not_run(why: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (no GPU): {} not run: {}",
        std::thread::current().name().unwrap_or("test"),
        why.lines().next().unwrap_or("")
    );
}

macro_rules! gpu_or_skip {
    () => {
        if let Some(why) = skip_reason() {
            not_run(&why);
            return;
        }
    };
}

fn add_one(s: &Stream, m: &Module, p: DevicePtr, n: i32) {
    let f = m.function("add_one_u32").unwrap();
    let (mut ptr, mut n_) = (p.0, n);
    let mut args = [
        &mut ptr as *mut u64 as *mut c_void,
        &mut n_ as *mut i32 as *mut c_void,
    ];
    // SAFETY: args match add_one_u32(unsigned*, int); p holds n u32.
    unsafe {
        s.launch(
            f,
            ((n as u32).div_ceil(128), 1, 1),
            (128, 1, 1),
            0,
            &mut args,
        )
    }
    .unwrap();
}

fn alloc(ctx: &Context, bytes: usize) -> DevicePtr {
    ctx.bind().unwrap();
    let mut d = 0u64;
    // SAFETY: context current.
    assert_eq!(
        unsafe { sys::cuMemAlloc_v2(&mut d, bytes) },
        sys::CUresult::CUDA_SUCCESS
    );
    DevicePtr(d)
}

fn read_u32(s: &Stream, p: DevicePtr, n: usize) -> Vec<u32> {
    let mut v = vec![0u32; n];
    // SAFETY: v has n u32; synchronised right after.
    unsafe { s.memcpy_dtoh(v.as_mut_ptr() as *mut u8, p, n * 4) }.unwrap();
    s.synchronize().unwrap();
    v
}

#[test]
fn properties_are_read() {
    gpu_or_skip!();
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let p = ctx.properties();
    println!("device: {p:#?}");
    assert!(p.sm() >= 50 && p.total_memory > 0 && p.multiprocessors > 0);
    assert!(p.driver_major() >= 12);
    let (free, total) = ctx.mem_info().unwrap();
    assert!(free <= total && total > 0);
    assert!(matches!(
        tether_runtime::cuda::properties(1 << 20),
        Err(CudaError::BadOrdinal { .. })
    ));
}

#[test]
fn primary_context_works_from_any_thread() {
    gpu_or_skip!();
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let c2 = ctx.clone();
    std::thread::spawn(move || {
        // The pitfall: the context is retained (by this process) but not current here.
        let mut d = 0u64;
        // SAFETY: plain driver call; it is expected to fail on a thread without a context.
        let res = unsafe { sys::cuMemAlloc_v2(&mut d, 256) };
        assert_eq!(
            res,
            sys::CUresult::CUDA_ERROR_INVALID_CONTEXT,
            "a fresh thread has no current context"
        );
        c2.bind().unwrap();
        // SAFETY: now current.
        assert_eq!(
            unsafe { sys::cuMemAlloc_v2(&mut d, 256) },
            sys::CUresult::CUDA_SUCCESS
        );
        // SAFETY: allocated above.
        unsafe { sys::cuMemFree_v2(d) };
        // Objects of the layer bind for themselves.
        let s = Stream::new(&c2, SyncPolicy::Yield).unwrap();
        s.synchronize().unwrap();
    })
    .join()
    .unwrap();
}

#[test]
fn every_sync_policy_waits_for_the_work() {
    gpu_or_skip!();
    for policy in [SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::Blocking] {
        let ctx = Context::new(0, policy).unwrap();
        let m = Module::load(
            &ctx,
            ModuleSource {
                images: IMAGES,
                source: None,
                allow_nvrtc: false,
            },
        )
        .unwrap();
        let s = Stream::new(&ctx, policy).unwrap();
        let n = 1 << 20;
        let p = alloc(&ctx, n * 4);
        // SAFETY: p holds n u32.
        unsafe { s.memset_u32(p, 0, n) }.unwrap();
        for _ in 0..50 {
            add_one(&s, &m, p, n as i32);
        }
        s.synchronize().unwrap();
        let v = read_u32(&s, p, n);
        assert!(v.iter().all(|&x| x == 50), "{policy:?}");
        println!("{policy:?}: ok ({} loaded)", m.image);
    }
}

#[test]
fn graph_capture_replays_and_rejects_uncapturable_work() {
    gpu_or_skip!();
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let m = Module::load(
        &ctx,
        ModuleSource {
            images: IMAGES,
            source: None,
            allow_nvrtc: false,
        },
    )
    .unwrap();
    let s = Stream::new(&ctx, SyncPolicy::Spin).unwrap();
    let n = 4096;
    let p = alloc(&ctx, n * 4);
    // SAFETY: p holds n u32.
    unsafe { s.memset_u32(p, 0, n) }.unwrap();
    add_one(&s, &m, p, n as i32); // eager warm-up
    let g = Graph::capture(&s, |s| -> Result<(), CudaError> {
        for _ in 0..3 {
            add_one(s, &m, p, n as i32);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(g.nodes(), 3);
    for _ in 0..10 {
        g.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert!(read_u32(&s, p, n).iter().all(|&x| x == 31));

    // Synchronising inside a capture is not capturable: a typed error, and the stream
    // stays usable.
    let e = Graph::capture(&s, |s| {
        // SAFETY: valid stream; synchronising a capturing stream is refused by the driver.
        let res = unsafe { sys::cuStreamSynchronize(s.raw()) };
        if res == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!("cuStreamSynchronize: {res:?}"))
        }
    })
    .err()
    .expect("capture must fail");
    assert!(matches!(e, CudaError::Capture(_)), "{e}");
    println!("uncapturable work reported as: {e}");
    add_one(&s, &m, p, n as i32);
    assert!(read_u32(&s, p, n).iter().all(|&x| x == 32));
}

#[test]
fn mapped_pinned_memory_is_read_and_written_in_place() {
    gpu_or_skip!();
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let m = Module::load(
        &ctx,
        ModuleSource {
            images: IMAGES,
            source: None,
            allow_nvrtc: false,
        },
    )
    .unwrap();
    let s = Stream::new(&ctx, SyncPolicy::Spin).unwrap();
    let n = 1000;
    let mut buf = PinnedBuffer::new(&ctx, n * 4, true).unwrap();
    let dev = buf.device_ptr().expect("mapped");
    for (i, b) in buf.as_mut_slice().chunks_exact_mut(4).enumerate() {
        b.copy_from_slice(&(i as u32).to_ne_bytes());
    }
    add_one(&s, &m, dev, n as i32);
    s.synchronize().unwrap();
    for (i, b) in buf.as_slice().chunks_exact(4).enumerate() {
        assert_eq!(u32::from_ne_bytes(b.try_into().unwrap()), i as u32 + 1);
    }
    let plain = PinnedBuffer::new(&ctx, 64, false).unwrap();
    assert!(plain.device_ptr().is_none());
    println!(
        "mapped pinned buffer: device alias {:#x}, integrated={}",
        dev.0,
        ctx.properties().integrated
    );
}
