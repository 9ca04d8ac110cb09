#!/usr/bin/env python3
"""Synthetic detectors with more than one output (issue 28), made from `dyn.onnx`.

`dyn.onnx` (this folder) is a YOLOv8-shaped detector: input `images` [1, 3, H, W],
one output `output0` [1, 5, anchors] (box rows, then the class-0 score = the mean red
level of each 32x32 cell). Each model written here adds an output of the head's shape
that is not the head, or renames things, to check how tether chooses the head:

  aux_first.onnx    `aux` (the head's values shifted by -2: scores outside [0, 1]) listed
                    BEFORE `output0`: the head is `output0`, by its name.
  unnamed.onnx      `aux` first, then the head renamed `head` (no `output0`): the head is
                    the output whose values look like one (class scores in [0, 1]).
  ambiguous.onnx    two outputs `head_a` and `head_b`, both the head's values, neither
                    named `output0`: refused, naming both.

Usage (needs the `onnx` package):  python3 tests/field/make_io_models.py
"""

import os

import onnx
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    return onnx.load(os.path.join(HERE, "dyn.onnx"))


def head_info(m):
    [out] = m.graph.output
    return out


def with_outputs(m, names_and_sources, extra_nodes):
    """Replace the graph outputs by (name, source tensor) pairs, adding `extra_nodes`."""
    g = m.graph
    head = head_info(m)
    g.node.extend(extra_nodes)
    del g.output[:]
    for name, src in names_and_sources:
        if name != src:
            g.node.append(helper.make_node("Identity", [src], [name], name=f"id_{name}"))
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(head)
        vi.name = name
        g.output.append(vi)
    onnx.checker.check_model(m)
    return m


def rename_head(m, new):
    """Rename the producer output `output0` to `new` everywhere."""
    for n in m.graph.node:
        n.output[:] = [new if o == "output0" else o for o in n.output]
        n.input[:] = [new if i == "output0" else i for i in n.input]
    return m


def main():
    shift = helper.make_tensor("minus_two", onnx.TensorProto.FLOAT, [], [-2.0])

    m = load()
    m.graph.initializer.append(shift)
    aux = helper.make_node("Add", ["output0", "minus_two"], ["aux"], name="aux_shift")
    m = with_outputs(m, [("aux", "aux"), ("output0", "output0")], [aux])
    onnx.save(m, os.path.join(HERE, "aux_first.onnx"))

    m = rename_head(load(), "head")
    m.graph.initializer.append(shift)
    aux = helper.make_node("Add", ["head", "minus_two"], ["aux"], name="aux_shift")
    m = with_outputs(m, [("aux", "aux"), ("head", "head")], [aux])
    onnx.save(m, os.path.join(HERE, "unnamed.onnx"))

    m = rename_head(load(), "head")
    m = with_outputs(m, [("head_a", "head"), ("head_b", "head")], [])
    onnx.save(m, os.path.join(HERE, "ambiguous.onnx"))


if __name__ == "__main__":
    main()
