#!/usr/bin/env python3
"""Write the tiny ONNX fixtures of runtime/tests/native_reference.rs (refusal tests).

usage: python3 make_fixtures.py   (needs the `onnx` package: pip install onnx==1.17.0)
"""
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save(graph, name, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tether-fixtures")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name))


# y, i = TopK(x, k=2) over the last axis: an operator the native engine does not lower.
k = numpy_helper.from_array(np.array([2], dtype=np.int64), "k")
save(helper.make_graph(
    [helper.make_node("TopK", ["x", "k"], ["y", "i"], name="the_topk", axis=-1)],
    "topk",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2]),
     helper.make_tensor_value_info("i", TensorProto.INT64, [1, 2])],
    [k]), "topk.onnx")

# y = Conv(x, w) with asymmetric padding (begin 0, end 1): cuDNN pads symmetrically.
w = numpy_helper.from_array(np.ones((3, 2, 3, 3), dtype=np.float32) * 0.1, "w")
save(helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["y"], name="the_conv", kernel_shape=[3, 3],
                      pads=[0, 0, 1, 1])],
    "conv_asym_pad",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 5])],
    [w]), "conv_asym_pad.onnx")

rng = np.random.default_rng(7)


def const(name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


# Transformer-style block (MiniLM-like ops): MatMul + bias, attention scores x @ x^T,
# softmax over the last and a middle axis, LayerNormalization, erf GELU, ReduceMean.
nodes = [
    helper.make_node("MatMul", ["x", "w1"], ["h"]),
    helper.make_node("Add", ["h", "b1"], ["hb"]),
    helper.make_node("Transpose", ["hb"], ["ht"], perm=[0, 2, 1]),
    helper.make_node("MatMul", ["hb", "ht"], ["scores"]),
    helper.make_node("Softmax", ["scores"], ["p_last"], axis=-1),
    helper.make_node("Softmax", ["scores"], ["p_mid"], axis=1),
    helper.make_node("Add", ["p_last", "p_mid"], ["p"]),
    helper.make_node("MatMul", ["p", "hb"], ["ctx"]),
    helper.make_node("LayerNormalization", ["ctx", "ln_s", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
    helper.make_node("Div", ["ln", "sqrt2"], ["ln_s2"]),
    helper.make_node("Erf", ["ln_s2"], ["erf"]),
    helper.make_node("Add", ["erf", "one"], ["erf1"]),
    helper.make_node("Mul", ["ln", "erf1"], ["g0"]),
    helper.make_node("Mul", ["g0", "half"], ["gelu"]),
    helper.make_node("ReduceMean", ["gelu", "axes1"], ["mean"], keepdims=1),
    helper.make_node("Sub", ["gelu", "mean"], ["y"]),
]
save(helper.make_graph(
    nodes, "transformer_ops",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 6])],
    [const("w1", [8, 6]), const("b1", [6]), const("ln_s", [6]), const("ln_b", [6]),
     numpy_helper.from_array(np.array(1.4142135, dtype=np.float32), "sqrt2"),
     numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
     numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
     numpy_helper.from_array(np.array([1], dtype=np.int64), "axes1")]), "transformer_ops.onnx", opset=18)

# Embedding lookup and attention-mask arithmetic (int64 inputs, Gather, Cast, Unsqueeze).
nodes = [
    helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
    helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
    helper.make_node("Sub", ["one", "mf"], ["inv"]),
    helper.make_node("Mul", ["inv", "big"], ["neg"]),
    helper.make_node("Unsqueeze", ["neg", "ax2"], ["neg3"]),
    helper.make_node("Add", ["e", "neg3"], ["y"]),
]
save(helper.make_graph(
    nodes, "gather_mask",
    [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 7]),
     helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 7])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, 4])],
    [const("emb", [20, 4]),
     numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
     numpy_helper.from_array(np.array(-10000.0, dtype=np.float32), "big"),
     numpy_helper.from_array(np.array([2], dtype=np.int64), "ax2")]), "gather_mask.onnx")

# Convolution variants: depthwise, dilated, strided, 1-D, average pooling both ways, constant
# pad, nearest x2 resize, concatenation along a spatial axis, max pooling with padding.
nodes = [
    helper.make_node("Conv", ["x", "wd"], ["dw"], group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    helper.make_node("Conv", ["dw", "wdil", "bdil"], ["dil"], kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
    helper.make_node("Conv", ["dil", "ws2"], ["s2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    helper.make_node("AveragePool", ["s2"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
    helper.make_node("AveragePool", ["s2"], ["ap1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    helper.make_node("MaxPool", ["s2"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Resize", ["mp", "", "scales"], ["up"], mode="nearest"),
    helper.make_node("Concat", ["ap", "ap1", "up"], ["cat"], axis=3),
    helper.make_node("Pad", ["cat", "pads", "padv"], ["padded"], mode="constant"),
    helper.make_node("Relu", ["padded"], ["r"]),
    helper.make_node("LeakyRelu", ["r"], ["y"], alpha=0.1),
]
save(helper.make_graph(
    nodes, "conv_variants",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 20])],
    [const("wd", [4, 1, 3, 3]), const("wdil", [6, 4, 3, 3]), const("bdil", [6]),
     const("ws2", [6, 6, 3, 3]),
     numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
     numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64), "pads"),
     numpy_helper.from_array(np.array(0.25, dtype=np.float32), "padv")]), "conv_variants.onnx")

# 1-D convolution and a transposed-layout matrix product (Conv1d + Transpose + MatMul).
nodes = [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[5], pads=[2, 2], strides=[1]),
    helper.make_node("Tanh", ["c"], ["t"]),
    helper.make_node("Transpose", ["t"], ["tt"], perm=[0, 2, 1]),
    helper.make_node("MatMul", ["tt", "w2"], ["y"]),
]
save(helper.make_graph(
    nodes, "conv1d",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 2])],
    [const("w", [4, 3, 5]), const("b", [4]), const("w2", [4, 2])]), "conv1d.onnx")

# Resize: linear (half_pixel, non-integer scale), linear align_corners downscale (sizes),
# nearest floor at 1.5x (asymmetric), cubic (half_pixel, sizes).
f = lambda v: numpy_helper.from_array(np.array(v, dtype=np.float32), None)
nodes = [
    helper.make_node("Resize", ["x", "", "s1"], ["y1"], mode="linear",
                     coordinate_transformation_mode="half_pixel"),
    helper.make_node("Resize", ["x", "", "", "z2"], ["y2"], mode="linear",
                     coordinate_transformation_mode="align_corners"),
    helper.make_node("Resize", ["x", "", "s3"], ["y3"], mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    helper.make_node("Resize", ["x", "", "", "z4"], ["y4"], mode="cubic",
                     coordinate_transformation_mode="half_pixel"),
]
save(helper.make_graph(
    nodes, "resize_variants",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])],
    [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 2, 10, 10]),
     helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 2, 4, 4]),
     helper.make_tensor_value_info("y3", TensorProto.FLOAT, [1, 2, 7, 10]),
     helper.make_tensor_value_info("y4", TensorProto.FLOAT, [1, 2, 8, 9])],
    [numpy_helper.from_array(np.array([1, 1, 2, 1.5], dtype=np.float32), "s1"),
     numpy_helper.from_array(np.array([1, 2, 4, 4], dtype=np.int64), "z2"),
     numpy_helper.from_array(np.array([1, 1, 1.5, 1.5], dtype=np.float32), "s3"),
     numpy_helper.from_array(np.array([1, 2, 8, 9], dtype=np.int64), "z4")]), "resize_variants.onnx", opset=13)
