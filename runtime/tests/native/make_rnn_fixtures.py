#!/usr/bin/env python3
"""Write the recurrent fixtures of runtime/tests/native_reference.rs and their goldens.

Each `NAME.onnx` gets a `NAME.golden.bin`: the fixture's inputs, then onnxruntime's outputs,
every array as little-endian float32, row-major, in the graph's input then output order
(shapes are the ones declared in the graph; the test knows them). The goldens come from
onnxruntime, never from tether.

usage: python3 make_rnn_fixtures.py   (pip install onnx numpy onnxruntime)
"""
import os
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20261201)


def uniform(*shape, scale=1.0):
    return (RNG.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32)


def save(graph, name, inputs, opset=17, golden=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tether-fixtures")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(HERE, name + ".onnx")
    onnx.save(model, path)
    if not golden:
        return
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {i.name: v for i, v in zip(graph.input, inputs)})
    with open(os.path.join(HERE, name + ".golden.bin"), "wb") as f:
        for a in list(inputs) + list(outs):
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# A forward LSTM over 5 time steps: batch 2, input 3, hidden 4, biases, initial h and c as
# graph inputs, all three outputs.
S, B, I, H = 5, 2, 3, 4
w = numpy_helper.from_array(uniform(1, 4 * H, I, scale=0.8), "W")
r = numpy_helper.from_array(uniform(1, 4 * H, H, scale=0.8), "R")
b = numpy_helper.from_array(uniform(1, 8 * H, scale=0.5), "B")
save(helper.make_graph(
    [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "y_h", "y_c"],
                      name="the_lstm", hidden_size=H)],
    "lstm_seq",
    [vi("x", [S, B, I]), vi("h0", [1, B, H]), vi("c0", [1, B, H])],
    [vi("y", [S, 1, B, H]), vi("y_h", [1, B, H]), vi("y_c", [1, B, H])],
    [w, r, b]), "lstm_seq", [uniform(S, B, I, scale=2.0), uniform(1, B, H), uniform(1, B, H)])

# A bidirectional LSTM over 4 time steps (batch 1, input 2, hidden 3), no bias, no initial
# state, then an element-wise op on the whole-sequence output.
S, B, I, H = 4, 1, 2, 3
w = numpy_helper.from_array(uniform(2, 4 * H, I), "W")
r = numpy_helper.from_array(uniform(2, 4 * H, H), "R")
save(helper.make_graph(
    [helper.make_node("LSTM", ["x", "W", "R"], ["y", "y_h"], name="the_bilstm",
                      hidden_size=H, direction="bidirectional"),
     helper.make_node("Tanh", ["y"], ["t"], name="after")],
    "lstm_bidir",
    [vi("x", [S, B, I])],
    [vi("t", [S, 2, B, H]), vi("y_h", [2, B, H])],
    [w, r]), "lstm_bidir", [uniform(S, B, I, scale=2.0)])

# ONNX Scan: a running sum (state) and twice the running sum (scan output) over 6 steps.
body = helper.make_graph(
    [helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="acc"),
     helper.make_node("Mul", ["s_out", "two"], ["y_t"], name="twice")],
    "body",
    [vi("s_in", [3]), vi("x_t", [3])],
    [vi("s_out", [3]), vi("y_t", [3])],
    [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")])
save(helper.make_graph(
    [helper.make_node("Scan", ["s0", "xs"], ["s_last", "ys"], name="the_scan", body=body,
                      num_scan_inputs=1)],
    "scan_cumsum",
    [vi("s0", [3]), vi("xs", [6, 3])],
    [vi("s_last", [3]), vi("ys", [6, 3])]), "scan_cumsum", [uniform(3), uniform(6, 3)])

# Refusal: an LSTM with `clip` (which tract's importer does not apply).
S, B, I, H = 3, 1, 2, 2
w = numpy_helper.from_array(uniform(1, 4 * H, I), "W")
r = numpy_helper.from_array(uniform(1, 4 * H, H), "R")
save(helper.make_graph(
    [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="the_clipped_lstm",
                      hidden_size=H, clip=0.5)],
    "lstm_clip",
    [vi("x", [S, B, I])],
    [vi("y", [S, 1, B, H])],
    [w, r]), "lstm_clip", [], golden=False)
