//! CUDA graphs: capture on a stream in thread-local mode, instantiate, launch.
//!
//! Capture follows what the field learned the hard way (field.md, item 1): capture only after
//! an eager warm-up (lazy module loading, engine first-run allocations), on a dedicated
//! non-default stream, in `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL` so that unrelated CUDA calls
//! on other threads cannot invalidate it; and never trust a replay without comparing it with
//! the eager result (the device session does that at load, `runtime/src/session/device.rs`).

use cudarc::driver::sys;

use super::device::Context;
use super::error::{CudaError, DriverError, check};
use super::stream::Stream;

/// An instantiated CUDA graph (the template graph is kept for inspection).
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: usize,
    ctx: Context,
}

// SAFETY: graph handles are usable from any thread with the context bound; launching the
// same exec concurrently from two threads is prevented by &mut/ownership in sessions.
unsafe impl Send for Graph {}

impl Graph {
    /// Capture everything `body` enqueues on `stream` into a graph and instantiate it.
    ///
    /// The capture is always ended, also when `body` fails, so the stream stays usable.
    ///
    /// # Errors
    /// [`CudaError::Capture`] naming the failing call when `body` fails or the driver
    /// invalidated the capture (a non-capturable call: synchronisation, allocation with the
    /// legacy allocator, a host-side wait, a call on another stream without events).
    pub fn capture<E: std::fmt::Display>(
        stream: &Stream,
        body: impl FnOnce(&Stream) -> Result<(), E>,
    ) -> Result<Graph, CudaError> {
        let ctx = stream.context().clone();
        ctx.bind()?;
        // SAFETY: stream is a live non-default stream of this context.
        unsafe {
            check(
                "cuStreamBeginCapture",
                sys::cuStreamBeginCapture_v2(
                    stream.raw(),
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                ),
            )
        }?;
        let body_result = body(stream).map_err(|e| e.to_string());
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: capture was begun on this stream by this thread.
        let end = unsafe {
            check(
                "cuStreamEndCapture",
                sys::cuStreamEndCapture(stream.raw(), &mut graph),
            )
        };
        if let Err(msg) = body_result {
            if !graph.is_null() {
                // SAFETY: graph returned by end capture, destroyed once.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            return Err(CudaError::Capture(msg));
        }
        end.map_err(|e| CudaError::Capture(format!("{e} (capture invalidated)")))?;
        let mut nodes = 0usize;
        // SAFETY: valid graph; with a null node array the call only writes the count.
        unsafe {
            check(
                "cuGraphGetNodes",
                sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes),
            )
        }?;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: valid graph; flags 0.
        let inst = unsafe {
            check(
                "cuGraphInstantiateWithFlags",
                sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            )
        };
        if let Err(e) = inst {
            // SAFETY: graph destroyed once.
            unsafe { sys::cuGraphDestroy(graph) };
            return Err(CudaError::Capture(e.to_string()));
        }
        // Upload ahead of the first launch so that launch does not pay for it.
        // SAFETY: exec and stream valid.
        unsafe { check("cuGraphUpload", sys::cuGraphUpload(exec, stream.raw())) }?;
        Ok(Graph {
            graph,
            exec,
            nodes,
            ctx,
        })
    }

    /// Number of nodes in the captured graph (kernels, copies, memsets).
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The instantiated graph handle.
    pub fn raw_exec(&self) -> sys::CUgraphExec {
        self.exec
    }

    /// Launch on `stream` (the one way to launch a graph). No allocation.
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: exec is a live instantiated graph of this stream's context.
        unsafe { check("cuGraphLaunch", sys::cuGraphLaunch(self.exec, stream.raw())) }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: both created in capture, destroyed once.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}
