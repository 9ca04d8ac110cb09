//! The tract CPU engine runs a recurrent network (ONNX `LSTM`, imported by tract as a scan)
//! as ONNX defines it: every run starts from the initial state its inputs give, so running
//! the same inputs twice on one executor gives onnxruntime's outputs both times. (tract keeps
//! a scan's hidden state in the run state between runs unless told otherwise: the second
//! run used to start from the first run's final state.)
//!
//! Fixture and golden: `tests/native/lstm_seq.onnx` and `.golden.bin` (inputs then
//! onnxruntime's outputs, little-endian f32), written by `tests/native/make_rnn_fixtures.py`.

use tether_runtime::backend::{Backend, NetworkSource, Plan, PrepareOptions, SourceFormat};
use tether_runtime::backends::tract_cpu::TractCpu;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/native")
            .join(name),
    )
    .unwrap()
}

#[test]
fn an_lstm_starts_from_its_initial_state_on_every_run() {
    // seq 5, batch 2, input 3, hidden 4: X, initial_h, initial_c -> Y, Y_h, Y_c.
    let ins: [&[usize]; 3] = [&[5, 2, 3], &[1, 2, 4], &[1, 2, 4]];
    let outs: [&[usize]; 3] = [&[5, 1, 2, 4], &[1, 2, 4], &[1, 2, 4]];
    let onnx = fixture("lstm_seq.onnx");
    let golden = fixture("lstm_seq.golden.bin");
    let mut values = golden
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()));
    let mut take =
        |shape: &[usize]| -> Vec<f32> { values.by_ref().take(shape.iter().product()).collect() };
    let inputs: Vec<Vec<f32>> = ins.iter().map(|s| take(s)).collect();
    let want: Vec<Vec<f32>> = outs.iter().map(|s| take(s)).collect();
    assert!(values.next().is_none(), "golden file size");

    let plan = TractCpu
        .prepare(
            &NetworkSource {
                network: "lstm_seq",
                format: SourceFormat::Onnx,
                bytes: &onnx,
                target: None,
            },
            &PrepareOptions {
                input_shapes: ins.iter().map(|s| s.to_vec()).collect(),
                ..PrepareOptions::default()
            },
        )
        .unwrap();
    #[allow(irrefutable_let_patterns)] // without the `cuda` feature a plan is always a host plan
    let Plan::Host(plan) = plan else {
        panic!("the tract CPU engine makes host plans")
    };
    let mut exec = plan.executor().unwrap();
    let in_bytes: Vec<Vec<u8>> = inputs
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let in_refs: Vec<&[u8]> = in_bytes.iter().map(Vec::as_slice).collect();
    for run in 1..=3 {
        let mut out_bytes: Vec<Vec<u8>> = want.iter().map(|w| vec![0u8; w.len() * 4]).collect();
        let mut out_refs: Vec<&mut [u8]> = out_bytes.iter_mut().map(Vec::as_mut_slice).collect();
        exec.run(&in_refs, &mut out_refs).unwrap();
        for (o, (got, w)) in out_bytes.iter().zip(&want).enumerate() {
            for (i, (g, w)) in got
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .zip(w)
                .enumerate()
            {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "run {run}, output {o}[{i}]: tract CPU {g}, onnxruntime {w}"
                );
            }
        }
    }
}

/// An LSTM attribute tract's importer would ignore (`clip`: the network would run as a plain
/// LSTM and answer wrongly with no error) is refused, naming the node, the operator and the
/// attribute. Fixture: `tests/native/lstm_clip.onnx` (`make_rnn_fixtures.py`).
#[test]
fn an_lstm_attribute_tract_would_ignore_is_refused() {
    let onnx = fixture("lstm_clip.onnx");
    let err = TractCpu
        .prepare(
            &NetworkSource {
                network: "lstm_clip",
                format: SourceFormat::Onnx,
                bytes: &onnx,
                target: None,
            },
            &PrepareOptions::default(),
        )
        .map(|_| ())
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, tether_runtime::PrepareError::Unsupported { ref op, ref detail, .. }
            if op == "LSTM" && detail.contains("clip")),
        "{text}"
    );
}
