//! The named-tensor API: one network of a bundle run on the caller's own tensors (the
//! runtime's `NetworkSession`), for applications with their own pre- and post-processing.

use std::ffi::{CStr, CString, c_char, c_void};

use tether_runtime::tensor::f16;
use tether_runtime::{
    DType, Element, IoMemory, IoMode, Model, ModelOptions, NetworkSession, TensorSpec,
};

use crate::error::{Failure, Result, guard, non_null, tether_status};
use crate::model::c_string;
use crate::options::{self, tether_options};

/// Element type of a tensor (`tether_tensor_info::dtype`); the values are the bundle
/// format's dtype codes.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_dtype {
    /// IEEE 754 binary32.
    TETHER_DTYPE_F32 = 1,
    /// IEEE 754 binary16.
    TETHER_DTYPE_F16 = 2,
    /// bfloat16 (listed; its data cannot be set or read through this API yet).
    TETHER_DTYPE_BF16 = 3,
    /// Signed 8-bit integer.
    TETHER_DTYPE_I8 = 4,
    /// Unsigned 8-bit integer.
    TETHER_DTYPE_U8 = 5,
    /// Signed 32-bit integer.
    TETHER_DTYPE_I32 = 6,
    /// Signed 64-bit integer.
    TETHER_DTYPE_I64 = 7,
    /// Boolean, one byte per element (0 or 1).
    TETHER_DTYPE_BOOL = 8,
}

/// Whether a tensor is an input or an output (`tether_network_tensor`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_io {
    /// A network input (set before `tether_network_run`).
    TETHER_IO_INPUT = 1,
    /// A network output (read after `tether_network_run`).
    TETHER_IO_OUTPUT = 2,
}

/// Where `tether_network_run_on_stream` reads the inputs and writes the outputs.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_memory {
    /// The host buffers (`tether_network_set_input`, `tether_network_input`,
    /// `tether_network_output`): the run copies the inputs to the device first and the
    /// outputs back last, when the stream reaches it (not during the call).
    TETHER_MEMORY_HOST = 1,
    /// The device buffers (`tether_network_device_buffer`): the run reads and writes them
    /// in place, no copy; the host buffers are neither read nor written.
    TETHER_MEMORY_DEVICE = 2,
}

/// One input or output of a network.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_tensor_info {
    /// The tensor's name in the network (the ONNX value name), NUL-terminated UTF-8; owned
    /// by the network handle, valid until `tether_network_close`.
    pub name: *const c_char,
    /// A `tether_dtype` value.
    pub dtype: u32,
    /// Dimensions used in `shape` (0 for a scalar), at most 8.
    pub rank: u32,
    /// The concrete shape, outermost first (row-major); entries past `rank` are 0.
    pub shape: [u64; 8],
    /// Bytes of the tensor's data: the product of the shape times the element size.
    pub size: usize,
}

/// One network of a bundle with its inputs and outputs as named tensors in host memory
/// (`tether_network_open`, `tether_network_close`). On the CPU the buffers are the
/// session's own; on a GPU they are page-locked staging buffers and a run is one captured
/// graph launch (upload, network, download) and one wait. Used by one thread at a time.
pub struct tether_network {
    session: NetworkSession,
    /// The tensors' names as C strings, inputs then outputs (made once at open).
    names: Vec<CString>,
    /// Set when a panic was caught in a call on this handle.
    poisoned: bool,
}

const _: () = {
    const fn send<T: Send>() {}
    send::<NetworkSession>();
};

impl From<tether_runtime::Error> for Failure {
    fn from(e: tether_runtime::Error) -> Self {
        use tether_runtime::Error as E;
        let status = match &e {
            E::NoSuchNetwork { .. } | E::NoSuchTensor { .. } => {
                tether_status::TETHER_ERR_INVALID_ARGUMENT
            }
            E::Run(tether_runtime::RunError::NotOnDevice { .. }) => {
                tether_status::TETHER_ERR_UNSUPPORTED
            }
            other => crate::error::runtime_status(other),
        };
        Failure::new(status, e.to_string())
    }
}

impl From<tether_runtime::RunError> for Failure {
    fn from(e: tether_runtime::RunError) -> Self {
        let status = match e {
            tether_runtime::RunError::NotOnDevice { .. } => tether_status::TETHER_ERR_UNSUPPORTED,
            _ => tether_status::TETHER_ERR_RUNTIME,
        };
        Failure::new(status, e.to_string())
    }
}

impl crate::error::Handle for tether_network {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
    fn describe(&self) -> String {
        format!("network `{}`", self.session.network())
    }
}

/// Run `f` on the network behind `net` as an entry point's body (null and poisoned
/// handles refused; a panic inside poisons the handle).
fn with_network(
    net: *mut tether_network,
    f: impl FnOnce(&mut tether_network) -> Result<()>,
) -> tether_status {
    crate::error::with_handle(net, "network", f)
}

/// A NUL-terminated C string argument as UTF-8 (no allocation unless bad).
///
/// # Safety
/// `p` is null or NUL-terminated.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    non_null(p, what)?;
    // SAFETY: NUL-terminated (contract; checked non-null).
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|e| {
        Failure::invalid(format!(
            "`{what}` is not UTF-8: invalid byte at offset {}",
            e.valid_up_to()
        ))
    })
}

/// The tensor named `name` among the network's inputs or outputs.
fn spec<'a>(n: &'a tether_network, input: bool, name: &str) -> Result<&'a TensorSpec> {
    let (list, mode) = if input {
        (n.session.inputs(), "input")
    } else {
        (n.session.outputs(), "output")
    };
    list.iter().find(|t| t.name == name).ok_or_else(|| {
        Failure::invalid(format!(
            "network `{}` has no {mode} `{name}`; its {mode}s: {}",
            n.session.network(),
            list.iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

fn unsupported_dtype(name: &str, dtype: DType) -> Failure {
    Failure::new(
        tether_status::TETHER_ERR_UNSUPPORTED,
        format!("tensor `{name}` is {dtype}: its data cannot be set or read through the C API"),
    )
}

/// `v`'s bytes.
fn bytes_of<T: Element>(v: &[T]) -> (*const u8, usize) {
    (v.as_ptr().cast(), std::mem::size_of_val(v))
}

/// The input buffer of `name` (pointer, bytes): the session's own, written in place.
fn input_buffer(n: &mut tether_network, name: &str) -> Result<(*mut u8, usize)> {
    let dtype = spec(n, true, name)?.dtype;
    let s = &mut n.session;
    fn raw<T: Element>(v: &mut [T]) -> (*mut u8, usize) {
        (v.as_mut_ptr().cast(), std::mem::size_of_val(v))
    }
    Ok(match dtype {
        DType::F32 => raw(s.input_mut::<f32>(name)?),
        DType::F16 => raw(s.input_mut::<f16>(name)?),
        DType::I64 => raw(s.input_mut::<i64>(name)?),
        DType::I32 => raw(s.input_mut::<i32>(name)?),
        DType::I8 => raw(s.input_mut::<i8>(name)?),
        DType::U8 | DType::Bool => raw(s.input_mut::<u8>(name)?),
        other => return Err(unsupported_dtype(name, other)),
    })
}

/// The output buffer of `name` (pointer, bytes), as the last run left it.
fn output_buffer(n: &tether_network, name: &str) -> Result<(*const u8, usize)> {
    let dtype = spec(n, false, name)?.dtype;
    let s = &n.session;
    Ok(match dtype {
        DType::F32 => bytes_of(s.output::<f32>(name)?),
        DType::F16 => bytes_of(s.output::<f16>(name)?),
        DType::I64 => bytes_of(s.output::<i64>(name)?),
        DType::I32 => bytes_of(s.output::<i32>(name)?),
        DType::I8 => bytes_of(s.output::<i8>(name)?),
        DType::U8 | DType::Bool => bytes_of(s.output::<u8>(name)?),
        other => return Err(unsupported_dtype(name, other)),
    })
}

/// Open network `network` of the bundle at `path` (null `network`: the bundle's only
/// network) on the device `options` asks for (null: defaults), with a session whose inputs
/// and outputs are named tensors in host memory. Inputs start zeroed; shapes are the ones
/// the bundle records (`tether_network_tensor`). On success `*out` receives a handle owned
/// by the caller (`tether_network_close`); on failure null, and the last error names the
/// path: `TETHER_ERR_IO`, `TETHER_ERR_BUNDLE`, `TETHER_ERR_RUNTIME`,
/// `TETHER_ERR_INVALID_ARGUMENT` (no such network, or several and `network` null; the
/// message lists them), `TETHER_ERR_UNSUPPORTED` for a network whose inputs the bundle
/// records with dynamic dimensions (OCR's and embeddings' networks: their family calls run
/// them). Only the named network is prepared.
///
/// On a GPU its inputs and outputs are also device buffers (`tether_network_device_buffer`)
/// and a run may be ordered on the caller's CUDA stream (`tether_network_run_on_stream`).
///
/// # Safety
/// `path` is null or NUL-terminated; `network` null or NUL-terminated; `options` null or
/// a `tether_options` of at least its `struct_size` bytes; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_open(
    path: *const c_char,
    network: *const c_char,
    options: *const tether_options,
    out: *mut *mut tether_network,
) -> tether_status {
    guard(|| {
        non_null(out, "out")?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { out.write(std::ptr::null_mut()) };
        non_null(path, "path")?;
        // SAFETY: NUL-terminated (contract; checked non-null).
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes),
        );
        let name = if network.is_null() {
            None
        } else {
            // SAFETY: forwarded contract.
            Some(unsafe { c_str(network, "network") }?)
        };
        // SAFETY: forwarded contract.
        let o = unsafe { options::read(options) }?;
        let opts = ModelOptions {
            device: o.device,
            verify_eagerly: o.verify_eagerly,
            // The named network alone: the bundle's others are neither prepared nor asked
            // for shapes (an unknown name is refused listing the bundle's networks).
            networks: name.map(|n| vec![n.to_string()]).unwrap_or_default(),
            ..o.model
        };
        let open = || -> Result<NetworkSession> {
            let model = Model::open(path, &opts).map_err(|e| match e {
                // A network whose inputs the bundle records with dynamic dimensions: its
                // family's call gives them shapes per input; this API has none to give.
                tether_runtime::Error::DynamicInput { .. } => Failure::new(
                    tether_status::TETHER_ERR_UNSUPPORTED,
                    format!(
                        "{e} (this API runs a network at the shapes its bundle records; run this family through its own call, such as tether_ocr or tether_embed)"
                    ),
                ),
                e => Failure::from(e),
            })?;
            Ok(match name {
                Some(n) => model.network_session(n)?,
                None => {
                    let n = model.single_network()?.name().to_string();
                    model.network_session(&n)?
                }
            })
        };
        let session = open().map_err(|e| e.context(&format!("loading {}", path.display())))?;
        let names = session
            .inputs()
            .iter()
            .chain(session.outputs())
            .map(|t| c_string(&t.name))
            .collect();
        let n = Box::new(tether_network {
            session,
            names,
            poisoned: false,
        });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(n)) };
        Ok(())
    })
}

/// Release a network handle. Null does nothing. Every pointer it handed out (tensor
/// names, input and output buffers) becomes invalid.
///
/// # Safety
/// `network` is null or an open handle no thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_close(network: *mut tether_network) {
    // SAFETY: the contract above is `close_handle`'s.
    unsafe { crate::error::close_handle(network) }
}

/// The number of inputs (`io` `TETHER_IO_INPUT`) or outputs (`TETHER_IO_OUTPUT`) into
/// `*count`.
///
/// # Safety
/// `network` is an open handle used by no other thread; `count` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_tensor_count(
    network: *mut tether_network,
    io: u32,
    count: *mut usize,
) -> tether_status {
    with_network(network, |n| {
        non_null(count, "count")?;
        let c = match io {
            1 => n.session.inputs().len(),
            2 => n.session.outputs().len(),
            v => return Err(bad_io(v)),
        };
        // SAFETY: writable (contract; checked non-null).
        unsafe { count.write(c) };
        Ok(())
    })
}

fn bad_io(v: u32) -> Failure {
    Failure::invalid(format!(
        "io is {v}; expected TETHER_IO_INPUT (1) or TETHER_IO_OUTPUT (2)"
    ))
}

/// Input or output `index` (0-based, in the network's order) into `*info`.
/// `TETHER_ERR_INVALID_ARGUMENT` for an index out of range.
///
/// # Safety
/// `network` is an open handle used by no other thread; `info` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_tensor(
    network: *mut tether_network,
    io: u32,
    index: usize,
    info: *mut tether_tensor_info,
) -> tether_status {
    with_network(network, |n| {
        non_null(info, "info")?;
        let inputs = n.session.inputs().len();
        let (list, offset, what) = match io {
            1 => (n.session.inputs(), 0, "inputs"),
            2 => (n.session.outputs(), inputs, "outputs"),
            v => return Err(bad_io(v)),
        };
        let t = list.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "index {index} is out of range: the network has {} {what}",
                list.len()
            ))
        })?;
        let mut shape = [0u64; 8];
        for (d, &s) in shape.iter_mut().zip(&t.shape) {
            *d = s as u64;
        }
        let record = tether_tensor_info {
            name: n.names[offset + index].as_ptr(),
            dtype: u32::from(t.dtype.raw()),
            rank: t.shape.len() as u32,
            shape,
            size: t.byte_len().unwrap_or(0),
        };
        // SAFETY: writable (contract; checked non-null).
        unsafe { info.write(record) };
        Ok(())
    })
}

/// Copy `size` bytes from `data` into input `name` (row-major, its dtype, `size` equal to
/// its `tether_tensor_info::size`). `TETHER_ERR_INVALID_ARGUMENT` for an unknown name (the
/// message lists the inputs) or another size; `TETHER_ERR_UNSUPPORTED` for a bf16 input.
///
/// # Safety
/// `network` is an open handle used by no other thread; `name` NUL-terminated; `data`
/// points to `size` readable bytes. Nothing is kept after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_set_input(
    network: *mut tether_network,
    name: *const c_char,
    data: *const c_void,
    size: usize,
) -> tether_status {
    with_network(network, |n| {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        non_null(data, "data")?;
        let (dst, len) = input_buffer(n, name)?;
        if size != len {
            return Err(Failure::invalid(format!(
                "input `{name}` holds {len} bytes, {size} given"
            )));
        }
        // SAFETY: `data` holds `size` readable bytes (contract), `dst` `len` writable
        // bytes of the session; distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(data.cast::<u8>(), dst, len) };
        Ok(())
    })
}

/// The body of the entry points that lend one named tensor's buffer (`tether_network_input`,
/// `tether_network_output`, `tether_network_device_buffer`): `name` read, `data` and `size`
/// checked (`data` named `data_name` in messages), then `buffer`'s (address, bytes) for that name
/// written to them.
///
/// # Safety
/// `network` is null or an open handle used by no other thread; `name` null or
/// NUL-terminated; `data` and `size` null or writable.
unsafe fn lend<P>(
    network: *mut tether_network,
    name: *const c_char,
    (data, data_name): (*mut P, &str),
    size: *mut usize,
    buffer: impl FnOnce(&mut tether_network, &str) -> Result<(P, usize)>,
) -> tether_status {
    with_network(network, |n| {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        non_null(data, data_name)?;
        non_null(size, "size")?;
        let (p, len) = buffer(n, name)?;
        // SAFETY: both writable (contract; checked non-null).
        unsafe {
            data.write(p);
            size.write(len);
        }
        Ok(())
    })
}

/// The buffer of input `name` into `*data` and `*size` (bytes), to write the input in place
/// instead of `tether_network_set_input` (no copy). Owned by the network: valid, at the same
/// address, until `tether_network_close`; write it only between calls on the network. Its
/// content stays between runs.
///
/// # Safety
/// `network` is an open handle used by no other thread; `name` NUL-terminated; `data` and
/// `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_input(
    network: *mut tether_network,
    name: *const c_char,
    data: *mut *mut c_void,
    size: *mut usize,
) -> tether_status {
    // SAFETY: the contract above is `lend`'s.
    unsafe {
        lend(network, name, (data, "data"), size, |n, name| {
            input_buffer(n, name).map(|(p, len)| (p.cast(), len))
        })
    }
}

/// Run the network once on its current inputs. The hot path: no allocation in this layer
/// (the engine's own: none on a GPU, tract's intermediates on the CPU).
/// `TETHER_ERR_RUNTIME` when the engine fails.
///
/// # Safety
/// `network` is an open handle used by no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_run(network: *mut tether_network) -> tether_status {
    with_network(network, |n| Ok(n.session.run()?))
}

/// Borrow output `name` of the last run: `*data` and `*size` (bytes, row-major, its
/// dtype). Owned by the network: valid until the next `tether_network_run` (which
/// rewrites it) or `tether_network_close`; read-only. Before the first run it holds zeros.
///
/// # Safety
/// `network` is an open handle used by no other thread; `name` NUL-terminated; `data` and
/// `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_output(
    network: *mut tether_network,
    name: *const c_char,
    data: *mut *const c_void,
    size: *mut usize,
) -> tether_status {
    // SAFETY: the contract above is `lend`'s.
    unsafe {
        lend(network, name, (data, "data"), size, |n, name| {
            output_buffer(n, name).map(|(p, len)| (p.cast(), len))
        })
    }
}

/// The device memory of input (`io` `TETHER_IO_INPUT`) or output (`TETHER_IO_OUTPUT`)
/// `name` on a GPU: its device address into `*address` (a `CUdeviceptr`; for the CUDA
/// runtime, `(void *)(uintptr_t)*address`) and its size in bytes into `*size` (row-major,
/// its dtype, as `tether_network_tensor` describes it). The buffer the network's captured
/// graph reads the input from or writes the output to: write a frame there with your own
/// kernel or copy (`cuMemcpyHtoDAsync`, `cudaMemcpyAsync`) and run with
/// `tether_network_run_on_stream(..., TETHER_MEMORY_DEVICE)`; read the output there after
/// it, on the same stream.
///
/// Owned by the network: valid, at the same address, until `tether_network_close`; on the
/// device the network was opened on (its primary context, the one the CUDA runtime uses).
/// A run with the host buffers (`tether_network_run`, `TETHER_MEMORY_HOST`) overwrites the
/// device inputs with the host ones and the device outputs with its results.
///
/// `TETHER_ERR_UNSUPPORTED` when the network runs on the CPU (the message names the device
/// and engine; nothing is written); `TETHER_ERR_INVALID_ARGUMENT` for an unknown name or
/// `io`.
///
/// # Safety
/// `network` is an open handle used by no other thread; `name` NUL-terminated; `address`
/// and `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_device_buffer(
    network: *mut tether_network,
    io: u32,
    name: *const c_char,
    address: *mut u64,
    size: *mut usize,
) -> tether_status {
    // SAFETY: the contract above is `lend`'s.
    unsafe {
        lend(network, name, (address, "address"), size, |n, name| {
            let mode = match io {
                1 => IoMode::Input,
                2 => IoMode::Output,
                v => return Err(bad_io(v)),
            };
            let b = n.session.device_buffer(mode, name).map_err(|e| {
                Failure::from(e).context(&format!("network `{}`", n.session.network()))
            })?;
            Ok((b.address, b.bytes))
        })
    }
}

/// Run the network once, ordered on the caller's CUDA stream `stream`, without waiting:
/// the run starts after the work enqueued on `stream` before the call, and work enqueued
/// on `stream` after the call sees its outputs (an event recorded on `stream`, the
/// network's own stream waiting on it, the captured graph launched there, an event
/// recorded after it that `stream` waits on). Returns once enqueued; synchronise `stream`
/// (or an event recorded on it) before reading outputs on the host. No allocation.
///
/// `stream` is a `CUstream` or a `cudaStream_t` (the same type; passed as `void *` so the
/// header needs no CUDA header) of the device the network was opened on, its primary
/// context; null is that context's legacy default stream. `memory` (`tether_memory`):
/// `TETHER_MEMORY_DEVICE` reads the inputs from and writes the outputs to the device
/// buffers of `tether_network_device_buffer` (the graph captured at open without the host
/// copies); `TETHER_MEMORY_HOST` copies from the host input buffers and to the host output
/// buffers when the stream reaches the run: leave them alone until then.
///
/// `TETHER_ERR_UNSUPPORTED` when the network runs on the CPU (the message names the device
/// and engine; nothing runs); `TETHER_ERR_INVALID_ARGUMENT` for another `memory`;
/// `TETHER_ERR_RUNTIME` when the driver refuses (a stream of another device, say).
///
/// # Safety
/// `network` is an open handle used by no other thread; `stream` null or a live stream of
/// that context, not being captured, until the call returns. Close the network only after
/// `stream` has passed its last use of the network's buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_run_on_stream(
    network: *mut tether_network,
    stream: *mut c_void,
    memory: u32,
) -> tether_status {
    with_network(network, |n| {
        let memory = match memory {
            1 => IoMemory::Host,
            2 => IoMemory::Device,
            v => {
                return Err(Failure::invalid(format!(
                    "memory is {v}; expected TETHER_MEMORY_HOST (1) or TETHER_MEMORY_DEVICE (2)"
                )));
            }
        };
        // SAFETY: forwarded contract.
        unsafe { n.session.run_on_stream(stream, memory) }
            .map_err(|e| Failure::from(e).context(&format!("network `{}`", n.session.network())))
    })
}

/// Copy output `name` of the last run into `dst` (`capacity` bytes); `*size` receives its
/// size in bytes. `TETHER_ERR_CAPACITY` when `capacity` < its size (nothing copied).
///
/// # Safety
/// `network` is an open handle used by no other thread; `name` NUL-terminated; `dst`
/// points to `capacity` writable bytes (may be null when `capacity` is 0); `size` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_copy_output(
    network: *mut tether_network,
    name: *const c_char,
    dst: *mut c_void,
    capacity: usize,
    size: *mut usize,
) -> tether_status {
    with_network(network, |n| {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        non_null(size, "size")?;
        let (p, len) = output_buffer(n, name)?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { size.write(len) };
        if capacity < len {
            return Err(Failure::new(
                tether_status::TETHER_ERR_CAPACITY,
                format!("output `{name}`: the buffer holds {capacity} bytes, {len} needed"),
            ));
        }
        non_null(dst, "dst")?;
        // SAFETY: `dst` holds `capacity >= len` writable bytes (contract); `p` `len`
        // readable bytes of the session.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.cast::<u8>(), len) };
        Ok(())
    })
}

/// The engine running the network into `*engine` (as `tether_model_engine`).
///
/// # Safety
/// `network` is an open handle used by no other thread; `engine` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_network_engine(
    network: *mut tether_network,
    engine: *mut *const c_char,
) -> tether_status {
    with_network(network, |n| {
        non_null(engine, "engine")?;
        let name = crate::model::engine_name(n.session.engine());
        // SAFETY: writable (contract; checked non-null).
        unsafe { engine.write(name.as_ptr()) };
        Ok(())
    })
}
