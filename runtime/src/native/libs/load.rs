//! Finding and loading cuDNN and cuBLAS at run time.
//!
//! The bindings (`cudarc`'s `cudnn` and `cublas` modules with dynamic loading) resolve every
//! symbol from the first of their candidate names that `dlopen` opens (the unversioned
//! `libcudnn.so` first, then versioned sonames), the first time one is called, and *panic*
//! when none opens or a symbol is missing. So, as for the driver ([`crate::cuda::loader`]),
//! this module decides first, never letting two copies of a library into the process:
//!
//! 1. When a candidate name of the bindings opens, that is the library: the bindings will open
//!    the very same object, whatever the shared search list says. Its file is reported (by
//!    `dladdr`) and its version checked. A host with two installations (a system cuDNN with
//!    the `libcudnn.so` development link, and a pip wheel's `libcudnn.so.9` on
//!    `LD_LIBRARY_PATH`) gets the one the bindings open, and the engine reports the
//!    installation mix if cuDNN then refuses its own sub-libraries
//!    (`CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH`).
//! 2. Otherwise the first library of [`search_list`] (the shared list `tether doctor`
//!    reports) that loads and exports the version entry point is opened by its full path and
//!    kept open for the life of the process; glibc matches the bindings' later `dlopen` of its
//!    soname against that loaded object, and the address of the version entry point seen
//!    through both handles is compared to prove it.
//!
//! Versions: cuDNN 9 is required (its legacy convolution/pooling API is what the engine
//! calls, and its status codes are the ones the bindings know); cuBLAS of the driver's CUDA
//! major (12 on JetPack 6, 13 on JetPack 7 and CUDA 13 data-center hosts) is preferred.

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::OnceLock;

use tether_targets::libs::{self, Library as TargetLibrary, SearchEnv, SearchReport};

/// Why cuDNN or cuBLAS is not usable.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LibraryError {
    /// No place of the shared search list ([`tether_targets::libs::search_list`]) had a
    /// library that loaded and exported the version entry point.
    #[error("{}; tried:\n{}", .report.summary(), format_tried(&.report.tried))]
    NotFound {
        /// "cuDNN" or "cuBLAS".
        library: &'static str,
        /// Every place tried, with what happened there.
        report: SearchReport,
    },
    /// The library loaded, but the bindings resolved another copy.
    #[error("{library} was loaded from {probed} but the bindings resolved another copy ({detail})")]
    Mismatch {
        /// "cuDNN" or "cuBLAS".
        library: &'static str,
        /// What this module opened.
        probed: PathBuf,
        /// What differed.
        detail: String,
    },
    /// The library's version is not one the engine supports.
    #[error("{library} {version} at {path} is not supported: {detail}")]
    Version {
        /// "cuDNN" or "cuBLAS".
        library: &'static str,
        /// The version found.
        version: String,
        /// Where.
        path: PathBuf,
        /// What is needed.
        detail: String,
    },
}

fn format_tried(tried: &[libs::Tried]) -> String {
    tried
        .iter()
        .map(|t| format!("  {t}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A loaded library.
#[derive(Debug)]
pub struct Library {
    /// "cuDNN" or "cuBLAS".
    pub name: &'static str,
    /// Where it was found (a full path, or the soname the dynamic loader resolved).
    pub path: PathBuf,
    /// `major.minor.patch`.
    pub version: String,
    /// The version as the library encodes it (`cudnnGetVersion`: 91900 for 9.19.0; cuBLAS:
    /// major * 10000 + minor * 100 + patch).
    pub version_code: u32,
    _lib: libloading::Library,
}

/// The places searched for `library`, in order: the same list `tether doctor` reports
/// ([`libs::search_list`]: the library's `TETHER_*_LIB` variable when set, else the dynamic
/// loader, the distribution and toolkit directories of this architecture, and pip's
/// `nvidia-*` wheels in the Python site-packages).
pub fn search_list(library: TargetLibrary) -> libs::SearchList {
    libs::search_list(library, &SearchEnv::system(), None)
}

type VersionFn = unsafe extern "C" fn() -> usize;
type GetPropertyFn = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;

/// The first library of the shared search list that loads and exports `symbol`; the
/// symbol's address is returned to compare with the bindings' copy.
/// `usable` may reject a library that loaded (the search then goes on to the next place).
fn open_first(
    name: &'static str,
    library: TargetLibrary,
    symbol: &[u8],
    usable: &dyn Fn(&libloading::Library) -> Result<(), String>,
) -> Result<(PathBuf, libloading::Library, usize), LibraryError> {
    let search = libs::find(&search_list(library), |lib, _path| {
        // SAFETY: symbol lookup only; the address is compared, not called here.
        let addr = unsafe { lib.get::<unsafe extern "C" fn()>(symbol) }
            .map(|s| *s as usize)
            .map_err(|e| e.to_string())?;
        usable(&lib)?;
        Ok((lib, addr))
    });
    match search.found {
        Some(found) => {
            let (lib, addr) = found.value;
            Ok((found.path, lib, addr))
        }
        None => Err(LibraryError::NotFound {
            library: name,
            report: search.report,
        }),
    }
}

/// What the bindings will open: the first of their candidate names for `lib_name` that
/// `dlopen` opens (the same names in the same order as `cudarc`'s `culib()`), with the file
/// it resolved to and the address of `symbol`. `None` when no candidate opens or it lacks
/// `symbol`.
fn bindings_choice(lib_name: &str, symbol: &[u8]) -> Option<(PathBuf, libloading::Library, usize)> {
    cudarc::get_lib_name_candidates(lib_name)
        .into_iter()
        .find_map(|name| {
            // SAFETY: loading a CUDA library runs its initialisers, as the bindings would.
            let lib = unsafe { libloading::Library::new(&name) }.ok()?;
            // SAFETY: symbol lookup only; the address is compared, not called here.
            let addr = unsafe { lib.get::<unsafe extern "C" fn()>(symbol) }
                .map(|s| *s as usize)
                .ok()?;
            Some((
                resolved_file(addr).unwrap_or_else(|| name.into()),
                lib,
                addr,
            ))
        })
}

/// The file of the loaded object that holds `addr` (`dladdr`).
fn resolved_file(addr: usize) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and fills `info`; `dli_fname` points into
    // the loader's own storage for the object, valid while the object stays loaded (it does:
    // the caller holds the library open).
    unsafe {
        if libc::dladdr(addr as *const libc::c_void, info.as_mut_ptr()) == 0 {
            return None;
        }
        let info = info.assume_init();
        if info.dli_fname.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(info.dli_fname);
        Some(PathBuf::from(name.to_string_lossy().into_owned()))
    }
}

fn load_cudnn() -> Result<Library, LibraryError> {
    let (path, lib, ours) = match bindings_choice("cudnn", b"cudnnGetVersion\0") {
        Some(chosen) => chosen,
        None => open_first("cuDNN", TargetLibrary::Cudnn, b"cudnnGetVersion\0", &|_| {
            Ok(())
        })?,
    };
    // SAFETY: `cudnnGetVersion` takes nothing and returns size_t in every cuDNN version.
    let code = unsafe {
        (*lib
            .get::<VersionFn>(b"cudnnGetVersion\0")
            .map_err(|e| LibraryError::Mismatch {
                library: "cuDNN",
                probed: path.clone(),
                detail: e.to_string(),
            })?)()
    } as u32;
    // cuDNN 9 encodes major * 10000 + minor * 100 + patch (8.x: major * 1000 + ...).
    let (vmaj, version) = if code >= 10000 {
        (
            code / 10000,
            format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100),
        )
    } else {
        (
            code / 1000,
            format!("{}.{}.{}", code / 1000, (code / 100) % 10, code % 100),
        )
    };
    if vmaj != 9 {
        return Err(LibraryError::Version {
            library: "cuDNN",
            version,
            path,
            detail: "the native engine needs cuDNN 9".into(),
        });
    }
    // SAFETY: `is_culib_present` only dlopens candidate sonames; `culib` then opens (and
    // caches) the first that loads, which resolves to our already loaded object by soname.
    let theirs = unsafe {
        if !cudarc::cudnn::sys::is_culib_present() {
            return Err(LibraryError::Mismatch {
                library: "cuDNN",
                probed: path,
                detail: "the bindings could not open any cuDNN soname".into(),
            });
        }
        cudarc::cudnn::sys::culib()
            .get::<unsafe extern "C" fn()>(b"cudnnGetVersion\0")
            .map(|s| *s as usize)
            .map_err(|e| e.to_string())
    };
    match theirs {
        Ok(t) if t == ours => {}
        Ok(t) => {
            return Err(LibraryError::Mismatch {
                library: "cuDNN",
                probed: path,
                detail: format!("cudnnGetVersion at {ours:#x} (ours) vs {t:#x} (bindings)"),
            });
        }
        Err(e) => {
            return Err(LibraryError::Mismatch {
                library: "cuDNN",
                probed: path,
                detail: e,
            });
        }
    }
    log::info!("cuDNN {version} loaded from {}", path.display());
    Ok(Library {
        name: "cuDNN",
        path,
        version,
        version_code: code,
        _lib: lib,
    })
}

/// (major, minor, patch) by `cublasGetProperty` (0 where it fails).
fn cublas_version(lib: &libloading::Library) -> (c_int, c_int, c_int) {
    // SAFETY: `cublasGetProperty(libraryPropertyType, int*)` in every cuBLAS since 8.0;
    // MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2.
    let prop = |p: c_int| -> Option<c_int> {
        let f = unsafe { lib.get::<GetPropertyFn>(b"cublasGetProperty\0") }.ok()?;
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        (unsafe { f(p, &mut v) } == 0).then_some(v)
    };
    (
        prop(0).unwrap_or(0),
        prop(1).unwrap_or(0),
        prop(2).unwrap_or(0),
    )
}

fn load_cublas() -> Result<Library, LibraryError> {
    let major = crate::cuda::driver().map(|d| d.major()).unwrap_or(13);
    // A cuBLAS newer than the driver's CUDA major does not run on it: skip it and go on
    // searching (the shared list names libcublas.so.13 before .12).
    let newer_than_driver = |lib: &libloading::Library| match cublas_version(lib) {
        (maj, ..) if maj as u32 > major.max(12) => Err(format!(
            "cuBLAS {maj} is newer than the driver's CUDA {major}"
        )),
        _ => Ok(()),
    };
    let (path, lib, ours) = match bindings_choice("cublas", b"cublasGetProperty\0") {
        Some(chosen) => chosen,
        None => open_first(
            "cuBLAS",
            TargetLibrary::Cublas,
            b"cublasGetProperty\0",
            &newer_than_driver,
        )?,
    };
    let (maj, min, pat) = cublas_version(&lib);
    let version = format!("{maj}.{min}.{pat}");
    if maj < 12 || maj as u32 > major.max(12) {
        return Err(LibraryError::Version {
            library: "cuBLAS",
            version,
            path,
            detail: format!("needs cuBLAS 12 or 13, no newer than the driver's CUDA {major}"),
        });
    }
    // SAFETY: as for cuDNN above.
    let theirs = unsafe {
        if !cudarc::cublas::sys::is_culib_present() {
            return Err(LibraryError::Mismatch {
                library: "cuBLAS",
                probed: path,
                detail: "the bindings could not open any cuBLAS soname".into(),
            });
        }
        cudarc::cublas::sys::culib()
            .get::<unsafe extern "C" fn()>(b"cublasGetProperty\0")
            .map(|s| *s as usize)
            .map_err(|e| e.to_string())
    };
    match theirs {
        Ok(t) if t == ours => {}
        Ok(t) => {
            return Err(LibraryError::Mismatch {
                library: "cuBLAS",
                probed: path,
                detail: format!("cublasGetProperty at {ours:#x} (ours) vs {t:#x} (bindings)"),
            });
        }
        Err(e) => {
            return Err(LibraryError::Mismatch {
                library: "cuBLAS",
                probed: path,
                detail: e,
            });
        }
    }
    log::info!("cuBLAS {version} loaded from {}", path.display());
    Ok(Library {
        name: "cuBLAS",
        path,
        version,
        version_code: (maj * 10000 + min * 100 + pat) as u32,
        _lib: lib,
    })
}

static CUDNN: OnceLock<Result<Library, LibraryError>> = OnceLock::new();
static CUBLAS: OnceLock<Result<Library, LibraryError>> = OnceLock::new();

/// cuDNN, loaded once per process.
///
/// # Errors
/// [`LibraryError`] naming every path tried, a mismatch, or an unsupported version.
pub fn cudnn() -> Result<&'static Library, LibraryError> {
    CUDNN.get_or_init(load_cudnn).as_ref().map_err(Clone::clone)
}

/// cuBLAS, loaded once per process.
///
/// # Errors
/// As [`cudnn`].
pub fn cublas() -> Result<&'static Library, LibraryError> {
    CUBLAS
        .get_or_init(load_cublas)
        .as_ref()
        .map_err(Clone::clone)
}

/// What `tether doctor` reports: each library's version and path, or why it is not usable.
#[derive(Debug)]
pub struct LibraryVersions {
    /// cuDNN.
    pub cudnn: Result<&'static Library, LibraryError>,
    /// cuBLAS.
    pub cublas: Result<&'static Library, LibraryError>,
}

/// Load (once) and report cuDNN and cuBLAS. Never panics; works without a GPU (then the
/// libraries may still be found, or each result says why not).
pub fn library_versions() -> LibraryVersions {
    LibraryVersions {
        cudnn: cudnn(),
        cublas: cublas(),
    }
}

impl Library {
    /// A one-line description: "cuDNN 9.19.0 (/path/libcudnn.so.9)".
    pub fn describe(&self) -> String {
        format!("{} {} ({})", self.name, self.version, self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_list_is_the_shared_one() {
        let list = search_list(TargetLibrary::Cudnn);
        assert_eq!(list.library, TargetLibrary::Cudnn);
        assert!(!list.places.is_empty());
        assert_eq!(
            list,
            libs::search_list(TargetLibrary::Cudnn, &SearchEnv::system(), None)
        );
    }

    #[test]
    fn missing_libraries_are_an_error_listing_every_path_not_a_panic() {
        // This machine has no cuDNN (CI); where it does, the result is Ok and says where.
        match cudnn() {
            Ok(l) => assert!(l.version.starts_with("9.")),
            Err(e @ LibraryError::NotFound { .. }) => {
                let LibraryError::NotFound { library, report } = &e else {
                    unreachable!()
                };
                assert_eq!(*library, "cuDNN");
                assert!(report.places >= 2, "{e}");
                assert!(e.to_string().contains("libcudnn.so.9"), "{e}");
            }
            Err(other) => panic!("unexpected: {other}"),
        }
    }
}
