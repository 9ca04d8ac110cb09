//! Pure logic of the CUDA device layer: runs everywhere, CI included (no GPU, no CUDA).
#![cfg(feature = "cuda")]

use tether_runtime::cuda::{ArenaPlan, CudaError, DEFAULT_ALIGN, KernelImage, image_order, loader};

#[test]
fn arena_offsets_are_aligned_disjoint_and_in_order() {
    let mut plan = ArenaPlan::new();
    let sizes = [1usize, 0, 4096, 13, 257, 1 << 20, 3];
    let ids: Vec<_> = sizes.iter().map(|&b| plan.add("r", b).unwrap()).collect();
    let mut end = 0;
    for (id, &b) in ids.iter().zip(&sizes) {
        let r = plan.region(*id);
        assert_eq!(r.bytes, b);
        assert_eq!(r.offset % DEFAULT_ALIGN, 0, "{r:?}");
        assert!(
            r.offset >= end,
            "{r:?} overlaps the previous region ending at {end}"
        );
        end = r.offset + r.bytes;
    }
    assert!(plan.total_bytes() >= end);
    assert_eq!(plan.total_bytes() % DEFAULT_ALIGN, 0);
    assert!(plan.total_bytes() - end < DEFAULT_ALIGN);
}

#[test]
fn arena_explicit_alignment_and_errors() {
    let mut plan = ArenaPlan::new();
    plan.add_aligned("a", 10, 16).unwrap();
    let b = plan.add_aligned("b", 10, 4096).unwrap();
    assert_eq!(plan.region(b).offset, 4096);
    assert!(matches!(
        plan.add_aligned("c", 1, 24),
        Err(CudaError::Arena(_))
    ));
    let mut big = ArenaPlan::new();
    big.add("x", usize::MAX - 8).unwrap();
    let e = big.add("y", 1024).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
    assert!(plan.describe().contains("\n"));
}

const fn img(name: &'static str, cuda_major: u32, sm: Option<u32>) -> KernelImage {
    KernelImage {
        name,
        cuda_major,
        sm,
        bytes: &[],
    }
}

#[test]
fn kernel_image_choice_follows_driver_major_then_sm() {
    let images = [
        img("cu13.fatbin", 13, None),
        img("cu12.sm_87", 12, Some(87)),
        img("cu12.sm_90", 12, Some(90)),
    ];
    let names = |v: Vec<usize>| v.into_iter().map(|i| images[i].name).collect::<Vec<_>>();
    // H200 host: driver 13, sm_90 -> the 13 fatbin, then the 12.9 cubin for sm_90.
    assert_eq!(
        names(image_order(&images, 90, 13)),
        ["cu13.fatbin", "cu12.sm_90"]
    );
    // JetPack 6 Orin: driver 12, sm_87 -> never the CUDA 13 image.
    assert_eq!(names(image_order(&images, 87, 12)), ["cu12.sm_87"]);
    // Thor on JetPack 7: driver 13, sm_110 -> only the fatbin holds sm_110.
    assert_eq!(names(image_order(&images, 110, 13)), ["cu13.fatbin"]);
    // A CUDA 11 driver: nothing loads (the error then lists each image as skipped).
    assert!(image_order(&images, 87, 11).is_empty());
}

#[test]
fn loader_searches_what_doctor_searches() {
    // The runtime's list is the platform crate's list for this machine: the one
    // `tether doctor` prints.
    let ours = loader::search_list();
    let doctor = tether_targets::libs::search_list(
        tether_targets::libs::Library::CudaDriver,
        &tether_targets::probe::ProbeOptions::system().search_env(),
        None,
    );
    assert_eq!(ours, doctor);
    let s: Vec<String> = ours.places.iter().map(|p| p.describe()).collect();
    if std::env::var_os("TETHER_LIBCUDA").is_none() {
        assert!(s[0].starts_with("dynamic loader"), "{s:?}");
    }
    // Only directories this architecture can hold.
    let foreign = if cfg!(target_arch = "x86_64") {
        ["aarch64", "tegra", "l4t-gpu-libs"]
    } else {
        ["x86_64", "wsl", "x86_64"]
    };
    for f in foreign {
        assert!(s.iter().all(|p| !p.contains(f)), "{f} among {s:?}");
    }
}

#[test]
fn no_driver_is_a_one_line_typed_error() {
    match loader::driver() {
        Ok(d) => eprintln!(
            "driver present ({}), CUDA {}.{}: nothing to check here",
            d.path.display(),
            d.major(),
            d.minor()
        ),
        Err(e @ CudaError::LibraryNotFound { .. }) => {
            let CudaError::LibraryNotFound { search } = &e else {
                unreachable!()
            };
            assert_eq!(search.places, loader::search_list().places.len());
            assert_eq!(search.tried.len(), search.places);
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "{msg}");
            assert!(
                msg.contains(&format!("searched {} places", search.places)),
                "{msg}"
            );
            eprintln!("no CUDA here, as expected on CI: {msg}");
        }
        Err(e) => eprintln!("driver found but unusable: {e}"),
    }
}
