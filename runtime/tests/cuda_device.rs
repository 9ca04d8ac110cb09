//! The device layer on a real GPU. Without a driver and a device (CI) every test is reported
//! *ignored* with the reason (a custom libtest-mimic harness decides at run time), never as a
//! pass. Run on the GPU host by runtime/gpu/h200-run.sh.

use cudarc::driver::sys;
use tether_runtime::cuda::{
    Context, CudaError, DevicePtr, Graph, KernelImage, KernelModule, ModuleSource, PinnedBuffer,
    Stream, SyncPolicy, skip_reason,
};
use tether_testkit::GpuTests;

/// The test kernels as PTX (JIT-compiled by the driver for whatever GPU runs the tests),
/// NUL-terminated as `cuModuleLoadData` wants PTX text.
static IMAGES: &[KernelImage] = &[KernelImage {
    name: "test_kernels.ptx",
    cuda_major: 12,
    sm: None,
    bytes: concat!(include_str!("kernels/test_kernels.ptx"), "\0").as_bytes(),
}];

fn module(ctx: &Context) -> KernelModule {
    KernelModule::load(
        ctx,
        ModuleSource {
            images: IMAGES,
            source: None,
            allow_nvrtc: false,
        },
    )
    .unwrap()
}

/// `struct AddOneParams` of test_kernels.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct AddOneParams {
    p: DevicePtr,
    n: i32,
    pad: i32,
}

fn add_one(s: &Stream, m: &KernelModule, p: DevicePtr, n: i32) {
    let f = m.function("add_one_u32").unwrap();
    let params = AddOneParams { p, n, pad: 0 };
    // SAFETY: params mirrors AddOneParams; p holds n u32.
    unsafe { s.launch_params(f, ((n as u32).div_ceil(128), 1, 1), (128, 1, 1), 0, &params) }
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

fn properties_are_read() {
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

fn primary_context_works_from_any_thread() {
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

fn every_sync_policy_waits_for_the_work() {
    for policy in [SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::Blocking] {
        let ctx = Context::new(0, policy).unwrap();
        let m = module(&ctx);
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

fn graph_capture_replays_and_rejects_uncapturable_work() {
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let m = module(&ctx);
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

fn mapped_pinned_memory_is_read_and_written_in_place() {
    let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
    let m = module(&ctx);
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

fn main() {
    GpuTests::new(skip_reason())
        .test("properties_are_read", properties_are_read)
        .test(
            "primary_context_works_from_any_thread",
            primary_context_works_from_any_thread,
        )
        .test(
            "every_sync_policy_waits_for_the_work",
            every_sync_policy_waits_for_the_work,
        )
        .test(
            "graph_capture_replays_and_rejects_uncapturable_work",
            graph_capture_replays_and_rejects_uncapturable_work,
        )
        .test(
            "mapped_pinned_memory_is_read_and_written_in_place",
            mapped_pinned_memory_is_read_and_written_in_place,
        )
        .run()
}
