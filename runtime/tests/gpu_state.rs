//! The request state on a real GPU: an appendable state's rows written by the append kernel
//! (`runtime/src/session/device/state.cu`) inside one captured graph, at every position,
//! across resets and slots, byte for byte what the host session writes for the same runs;
//! the cursor read from device memory (staged and uploaded) and read in place from mapped
//! staging. Without a driver and a device (CI) every test is reported *ignored* with the
//! reason (`tether_testkit::GpuTests` decides at run time), never as a pass. On the GPU host:
//! `gpu_state --test-threads=1`.

use tether_runtime::cuda::{Context, SyncPolicy, skip_reason};
use tether_runtime::session::{
    AppendDecl, AppendState, Check, Cursor, ExecMode, MappedIo, PipelineSpec, RegionId, RegionKind,
    Session, SessionOptions, StateError,
};
use tether_runtime::{Placement, RunError};

const SLOTS: usize = 2;
const CAPACITY: usize = 37;
const MAX_ROWS: usize = 5;

/// Three states whose row sizes take each copy unit of the kernel: 32 bytes (16-byte
/// words), 12 bytes (4-byte words), 3 bytes (bytes).
const ROW_BYTES: [usize; 3] = [32, 12, 3];

struct Built {
    session: Session,
    states: Vec<(AppendState, RegionId)>,
}

fn build(options: &SessionOptions) -> Built {
    let mut spec = PipelineSpec::new();
    let mut states = Vec::new();
    for (i, &row_bytes) in ROW_BYTES.iter().enumerate() {
        let new = spec
            .region(
                format!("new {i}"),
                SLOTS * MAX_ROWS * row_bytes,
                RegionKind::Input,
                Check::Exact,
            )
            .unwrap();
        let state = spec
            .append_state(AppendDecl {
                name: format!("cache {i}"),
                row_bytes,
                capacity: CAPACITY,
                slots: SLOTS,
                max_rows: MAX_ROWS,
                rows_per_run: 1,
                check: Check::Exact,
            })
            .unwrap();
        spec.append_rows(state.id, new).unwrap();
        states.push((state, new));
    }
    Built {
        session: Session::new(spec, options).unwrap(),
        states,
    }
}

fn device_options(mapped: MappedIo) -> SessionOptions {
    SessionOptions {
        context: Some(Context::new(0, SyncPolicy::Spin).unwrap()),
        mapped,
        ..SessionOptions::default()
    }
}

/// The run's input rows: distinct bytes per (run, state, slot, row).
fn fill(b: &mut Built, run: usize) {
    for (i, (_, new)) in b.states.iter().enumerate() {
        let bytes = b.session.input_mut(*new).unwrap();
        for (k, v) in bytes.iter_mut().enumerate() {
            *v = (run * 131 + i * 29 + k * 7 + 1) as u8;
        }
    }
}

fn rows(b: &mut Built, i: usize) -> Vec<u8> {
    let mut v = vec![0u8; SLOTS * CAPACITY * ROW_BYTES[i]];
    b.session.read_region(b.states[i].0.rows, &mut v).unwrap();
    v
}

/// The valid rows of every state and slot (past a cursor nothing is defined).
fn valid(b: &mut Built) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..ROW_BYTES.len() {
        let all = rows(b, i);
        let id = b.states[i].0.id;
        for slot in 0..SLOTS {
            let n = b.session.cursor(id, slot).unwrap().position as usize;
            let at = slot * CAPACITY * ROW_BYTES[i];
            out.push(all[at..at + n * ROW_BYTES[i]].to_vec());
        }
    }
    out
}

/// One request plan: per run, rows per slot (the same for every state).
fn plan() -> Vec<[usize; SLOTS]> {
    let mut p = vec![[5, 3], [1, 0], [2, 5], [0, 1]];
    p.extend(std::iter::repeat_n([1, 1], 20));
    p
}

fn run_both(gpu: &mut Built, cpu: &mut Built, run: usize, rows: [usize; SLOTS]) {
    for b in [&mut *gpu, &mut *cpu] {
        for i in 0..ROW_BYTES.len() {
            let id = b.states[i].0.id;
            for (slot, &n) in rows.iter().enumerate() {
                b.session.set_next_rows(id, slot, n).unwrap();
            }
        }
        fill(b, run);
        b.session.run().unwrap();
    }
    assert_eq!(valid(gpu), valid(cpu), "run {run}: rows {rows:?}");
}

/// One captured graph appends at every position (the cursor in device memory), slots on
/// their own, through two requests; the host session's rows are the reference.
fn one_graph_appends_at_every_position(mapped: MappedIo) {
    let mut gpu = build(&device_options(mapped));
    let mut cpu = build(&SessionOptions::default());
    assert_eq!(gpu.session.placement(), Placement::Device);
    assert_eq!(cpu.session.placement(), Placement::Host);
    let d = gpu.session.device().unwrap();
    let (mode, note) = d.exec_mode();
    eprintln!(
        "{mapped:?}: {mode:?}: {note}; mapped staging {}",
        d.is_mapped()
    );
    assert_eq!(mode, ExecMode::WholeGraph, "{note}");
    assert!(
        note.contains("one graph of") && note.contains("matches"),
        "{note}"
    );
    for request in 0..2 {
        for (run, rows) in plan().into_iter().enumerate() {
            run_both(&mut gpu, &mut cpu, request * 100 + run, rows);
        }
        let id = gpu.states[0].0.id;
        assert_eq!(gpu.session.cursor(id, 0).unwrap().position, 28);
        assert_eq!(gpu.session.cursor(id, 1).unwrap().position, 29);
        gpu.session.reset_states().unwrap();
        cpu.session.reset_states().unwrap();
    }
    // Slot 1 restarts; slot 0 keeps its rows.
    for run in 0..3 {
        run_both(&mut gpu, &mut cpu, 300 + run, [2, 2]);
    }
    for b in [&mut gpu, &mut cpu] {
        for i in 0..ROW_BYTES.len() {
            b.session.reset_slot(b.states[i].0.id, 1).unwrap();
        }
    }
    run_both(&mut gpu, &mut cpu, 400, [1, 4]);
    let id = gpu.states[2].0.id;
    assert_eq!(gpu.session.cursor(id, 0).unwrap().position, 7);
    assert_eq!(gpu.session.cursor(id, 1).unwrap().position, 4);
}

fn staged() {
    one_graph_appends_at_every_position(MappedIo::Never);
}

fn mapped() {
    one_graph_appends_at_every_position(MappedIo::Always);
}

/// Up to the last row, then a typed error before anything runs: the rows stay as they
/// were; a bare graph launch (benchmarks' floor) advances like a run.
fn the_capacity_is_never_passed() {
    let mut gpu = build(&device_options(MappedIo::Auto));
    let id = gpu.states[0].0.id;
    let mut position = 0;
    while position + MAX_ROWS <= CAPACITY {
        for (state, _) in &gpu.states {
            gpu.session.set_next_rows(state.id, 0, MAX_ROWS).unwrap();
        }
        fill(&mut gpu, position);
        gpu.session.run().unwrap();
        position += MAX_ROWS;
    }
    // 35 rows in slot 0, 7 in slot 1; two more fit in slot 0, in a bare launch then a run.
    assert_eq!(gpu.session.cursor(id, 0).unwrap().position, 35);
    gpu.session
        .device_mut()
        .unwrap()
        .launch_graphs_and_wait()
        .unwrap();
    gpu.session.run().unwrap();
    assert_eq!(
        gpu.session.cursor(id, 0).unwrap(),
        Cursor {
            position: 37,
            length: 38
        }
    );
    let before = rows(&mut gpu, 0);
    let e = gpu.session.run().unwrap_err();
    assert_eq!(
        e,
        RunError::State(StateError::Full {
            state: 0,
            slot: 0,
            position: 37,
            rows: 1,
            capacity: 37
        })
    );
    assert_eq!(rows(&mut gpu, 0), before, "nothing ran");
    gpu.session.reset_states().unwrap();
    gpu.session.run().unwrap();
    assert_eq!(gpu.session.cursor(id, 0).unwrap().position, 1);
}

fn main() {
    tether_testkit::GpuTests::new(skip_reason())
        .test("append::one_graph_appends_at_every_position_staged", staged)
        .test("append::one_graph_appends_at_every_position_mapped", mapped)
        .test(
            "append::the_capacity_is_never_passed",
            the_capacity_is_never_passed,
        )
        .run()
}
