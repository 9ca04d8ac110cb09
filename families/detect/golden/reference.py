#!/usr/bin/env python3
"""Reference YOLOv8 (Ultralytics detection head) pipeline: onnxruntime + numpy.

Writes the golden JSON the Rust `detect` family is tested against. This
docstring is the contract; the Rust code implements the same steps.

Image load
    PIL, converted to RGB (`Image.convert("RGB")`: grayscale is replicated to
    3 channels; RGBA drops alpha, no compositing). Image size H x W, u8.

Letterbox to the network input (in_h, in_w)
    - r = min(in_h / H, in_w / W), computed in float64.
    - new_w = floor(W * r + 0.5), new_h = floor(H * r + 0.5) (ints), clamped to
      at least 1 and at most in_w / in_h.
    - left = (in_w - new_w) // 2, top = (in_h - new_h) // 2 (integer floor
      division).
    - Canvas [in_h, in_w, 3] float32 filled with 114.0; the resized image is
      written at [top:top+new_h, left:left+new_w].
    - Resize: bilinear with half-pixel centres (like cv2 INTER_LINEAR /
      PyTorch align_corners=False, no antialias), computed in float32 from the
      u8 source. For destination column x:
          sx = W / new_w                       (float32)
          src_x = (x + 0.5) * sx - 0.5         (float32)
          src_x = max(src_x, 0)
          x0 = min(floor(src_x), W - 1); x1 = min(x0 + 1, W - 1)
          fx = src_x - x0                      (float32)
      and the same for rows with sy = H / new_h, giving y0, y1, fy. Then
          value = (1-fy)*((1-fx)*p[y0,x0] + fx*p[y0,x1])
                +    fy*((1-fx)*p[y1,x0] + fx*p[y1,x1])
      with exactly that operation order, all float32 (no FMA), no rounding
      back to u8.
    - Divide by 255 (float32 division, padding included), HWC -> CHW, add the
      batch dim: input `images` f32 [1, 3, in_h, in_w], RGB order.

Model run
    onnxruntime CPUExecutionProvider, intra_op_num_threads=1,
    inter_op_num_threads=1, sequential execution, default graph optimisation.

Decode output [1, 4 + C, N]
    For each anchor n: box (cx, cy, w, h) = rows 0..4 in network-input pixels;
    class scores = rows 4..4+C (already sigmoid); class = argmax (first max),
    score = max. Keep if score > score_threshold (strict; the threshold is
    converted to float32 and compared in float32).
    x1 = cx - w/2, y1 = cy - h/2, x2 = cx + w/2, y2 = cy + h/2 (float32).

NMS
    Sort kept candidates by score descending, ties by lower anchor index first
    (stable sort). Greedy class-wise NMS: walk in that order; a candidate is
    suppressed if its IoU with an already-kept box OF THE SAME CLASS is
    > iou_threshold (strict; threshold converted to float32). IoU (float32):
        area = max(0, x2-x1) * max(0, y2-y1)
        iw = max(0, min(ax2, bx2) - max(ax1, bx1)); ih likewise; inter = iw*ih
        IoU = inter / (area_a + area_b - inter); if that denominator <= 0,
        IoU = 0.
    Stop once max_detections are kept.

Map back to original-image pixels (float64 from the float32 box values)
    x = (x - left) / r, y = (y - top) / r, then clamp x to [0, W], y to [0, H].

Defaults: score_threshold 0.25, iou_threshold 0.7, max_detections 300.

Class names: ONNX metadata_props key `names`, a Python-dict literal string
like "{0: 'Caption', 1: 'Footnote', 10: 'Title', 2: ...}" (keys not in order),
parsed with ast.literal_eval; class_names[i] = names[i] for i in 0..C-1.

Extra fields so Rust can check the model run apart from post-processing:
    raw_output_shape; raw_output_sample: out[0, :, k] (4+C floats) for the
    anchors k in (0, 1, N//7, N//3, N//2, 2N//3, N-2, N-1);
    input_checksum: sum of all input tensor values in float64 (math.fsum,
    i.e. correctly rounded); input_sample: input[0, c, y, x] for 8 fixed
    positions (input_sample_positions() below: corners, centre and
    points inside the image and in the padding), listed with their (c, y, x).
    `margins` (diagnostic only): how close any score / NMS IoU came to its
    threshold, so a test can tell whether a tiny numeric difference could flip
    a decision.

Usage:
    python reference.py --model M.onnx --image I.png --input-size H W \
        --out golden.json [--score 0.25 --iou 0.7 --max-det 300]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import sys

import numpy as np
import onnxruntime as ort
import PIL
from PIL import Image

F32 = np.float32


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_rgb(path: str) -> np.ndarray:
    """u8 [H, W, 3], RGB."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


def letterbox_params(h: int, w: int, in_h: int, in_w: int):
    r = min(in_h / h, in_w / w)  # float64
    new_w = min(max(int(math.floor(w * r + 0.5)), 1), in_w)
    new_h = min(max(int(math.floor(h * r + 0.5)), 1), in_h)
    left = (in_w - new_w) // 2
    top = (in_h - new_h) // 2
    return r, new_w, new_h, left, top


def _axis_coords(src: int, dst: int):
    """Half-pixel-centre source coordinates for one axis, all float32."""
    s = F32(src) / F32(dst)
    d = np.arange(dst, dtype=F32)
    pos = (d + F32(0.5)) * s - F32(0.5)
    pos = np.maximum(pos, F32(0.0))
    i0 = np.minimum(np.floor(pos).astype(np.int64), src - 1)
    i1 = np.minimum(i0 + 1, src - 1)
    frac = (pos - i0.astype(F32)).astype(F32)
    return i0, i1, frac


def resize_bilinear_f32(img_u8: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    h, w, _ = img_u8.shape
    p = img_u8.astype(F32)
    y0, y1, fy = _axis_coords(h, new_h)
    x0, x1, fx = _axis_coords(w, new_w)
    fx = fx[None, :, None]
    fy = fy[:, None, None]
    one = F32(1.0)
    p00 = p[y0][:, x0]
    p01 = p[y0][:, x1]
    p10 = p[y1][:, x0]
    p11 = p[y1][:, x1]
    top = (one - fx) * p00 + fx * p01
    bot = (one - fx) * p10 + fx * p11
    out = (one - fy) * top + fy * bot
    assert out.dtype == F32
    return out


def preprocess(img_u8: np.ndarray, in_h: int, in_w: int):
    h, w, _ = img_u8.shape
    r, new_w, new_h, left, top = letterbox_params(h, w, in_h, in_w)
    canvas = np.full((in_h, in_w, 3), F32(114.0), dtype=F32)
    canvas[top:top + new_h, left:left + new_w] = resize_bilinear_f32(img_u8, new_h, new_w)
    x = canvas / F32(255.0)
    x = np.ascontiguousarray(x.transpose(2, 0, 1)[None])
    assert x.dtype == F32
    lb = {"r": r, "left": left, "top": top, "new_w": new_w, "new_h": new_h}
    return x, lb


def make_session(model_path: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_path, sess_options=so, providers=["CPUExecutionProvider"])


def class_names_from(sess: ort.InferenceSession, num_classes: int) -> list[str]:
    meta = sess.get_modelmeta().custom_metadata_map
    if "names" not in meta:
        raise SystemExit("model has no 'names' metadata")
    names = ast.literal_eval(meta["names"])
    if set(names) != set(range(num_classes)):
        raise SystemExit(f"'names' keys {sorted(names)} do not match {num_classes} classes")
    return [str(names[i]) for i in range(num_classes)]


def iou_f32(a, b) -> np.float32:
    zero = F32(0.0)
    area_a = max(zero, a[2] - a[0]) * max(zero, a[3] - a[1])
    area_b = max(zero, b[2] - b[0]) * max(zero, b[3] - b[1])
    iw = max(zero, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(zero, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    denom = area_a + area_b - inter
    if denom <= zero:
        return zero
    return F32(inter / denom)


def decode_nms(out: np.ndarray, score_thr: float, iou_thr: float, max_det: int):
    """out: [4+C, N] float32. Returns (kept list, margins dict)."""
    assert out.dtype == F32
    cx, cy, w, h = out[0], out[1], out[2], out[3]
    scores = out[4:]
    cls = np.argmax(scores, axis=0)  # first max
    score = np.max(scores, axis=0)
    thr = F32(score_thr)
    ithr = F32(iou_thr)
    keep = np.nonzero(score > thr)[0]  # ascending anchor index
    two = F32(2.0)
    x1 = cx - w / two
    y1 = cy - h / two
    x2 = cx + w / two
    y2 = cy + h / two
    order = keep[np.argsort(-score[keep], kind="stable")]

    margins = {
        "min_abs_score_minus_threshold": float(np.min(np.abs(score.astype(np.float64) - float(thr)))),
        "min_abs_iou_minus_threshold": None,
        "num_candidates": int(keep.size),
    }
    min_iou_margin = math.inf

    kept = []  # (anchor, cls, score, box f32[4])
    for n in order:
        if len(kept) >= max_det:
            break
        c = int(cls[n])
        box = (x1[n], y1[n], x2[n], y2[n])
        suppressed = False
        for (_, kc, _, kb) in kept:
            if kc != c:
                continue
            v = iou_f32(box, kb)
            min_iou_margin = min(min_iou_margin, abs(float(v) - float(ithr)))
            if v > ithr:
                suppressed = True
                break
        if not suppressed:
            kept.append((int(n), c, score[n], box))
    if min_iou_margin != math.inf:
        margins["min_abs_iou_minus_threshold"] = min_iou_margin
    return kept, margins


def sample_anchors(n: int) -> list[int]:
    return [0, 1, n // 7, n // 3, n // 2, 2 * n // 3, n - 2, n - 1]


def input_sample_positions(in_h: int, in_w: int) -> list[tuple[int, int, int]]:
    """8 fixed (c, y, x) positions spread over the input tensor."""
    return [
        (0, 0, 0),
        (1, in_h // 2, in_w // 2),
        (2, in_h - 1, in_w - 1),
        (0, in_h // 4, in_w // 3),
        (1, in_h // 3, (3 * in_w) // 4),
        (2, (2 * in_h) // 3, in_w // 5),
        (0, (3 * in_h) // 4, (2 * in_w) // 3),
        (2, in_h // 2 + 1, in_w // 7),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--input-size", nargs=2, type=int, required=True, metavar=("H", "W"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--score", type=float, default=0.25)
    ap.add_argument("--iou", type=float, default=0.7)
    ap.add_argument("--max-det", type=int, default=300)
    args = ap.parse_args(argv)
    in_h, in_w = args.input_size

    img = load_rgb(args.image)
    H, W, _ = img.shape
    x, lb = preprocess(img, in_h, in_w)

    sess = make_session(args.model)
    inp = sess.get_inputs()[0]
    for dim, want in zip(inp.shape[2:], (in_h, in_w)):
        if isinstance(dim, int) and dim != want:
            raise SystemExit(f"model input is fixed at {inp.shape}, got --input-size {in_h} {in_w}")
    out_name = sess.get_outputs()[0].name
    raw = sess.run([out_name], {inp.name: x})[0]
    if raw.ndim != 3 or raw.shape[0] != 1 or raw.shape[1] <= 4:
        raise SystemExit(f"unexpected output shape {raw.shape}")
    raw = raw.astype(F32, copy=False)
    C = raw.shape[1] - 4
    N = raw.shape[2]
    names = class_names_from(sess, C)

    kept, margins = decode_nms(raw[0], args.score, args.iou, args.max_det)

    r, left, top = lb["r"], lb["left"], lb["top"]
    dets = []
    for (anchor, c, s, box) in kept:
        bx1, by1, bx2, by2 = (float(v) for v in box)
        mx1 = min(max((bx1 - left) / r, 0.0), float(W))
        my1 = min(max((by1 - top) / r, 0.0), float(H))
        mx2 = min(max((bx2 - left) / r, 0.0), float(W))
        my2 = min(max((by2 - top) / r, 0.0), float(H))
        dets.append({
            "class_id": c,
            "class_name": names[c],
            "score": float(s),
            "box": [mx1, my1, mx2, my2],
            "anchor": anchor,
            "box_input_px": [bx1, by1, bx2, by2],
        })

    golden = {
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "image": os.path.basename(args.image),
        "image_sha256": sha256_file(args.image),
        "image_size": [H, W],
        "input_size": [in_h, in_w],
        "input_name": inp.name,
        "output_name": out_name,
        "letterbox": lb,
        "score_threshold": args.score,
        "iou_threshold": args.iou,
        "max_detections": args.max_det,
        "class_names": names,
        "onnxruntime_version": ort.__version__,
        "numpy_version": np.__version__,
        "pillow_version": PIL.__version__,
        "input_checksum": math.fsum(x.astype(np.float64).ravel().tolist()),
        "input_sample": [
            {"c": c, "y": yy, "x": xx, "value": float(x[0, c, yy, xx])}
            for (c, yy, xx) in input_sample_positions(in_h, in_w)
        ],
        "raw_output_shape": list(raw.shape),
        "raw_output_sample": [
            {"anchor": k, "values": [float(v) for v in raw[0, :, k]]}
            for k in sample_anchors(N)
        ],
        "margins": margins,
        "detections": dets,
    }
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")

    print(f"{golden['model']} on {golden['image']} ({H}x{W}) -> input {in_h}x{in_w}, "
          f"letterbox {lb}, {len(dets)} detections (of {margins['num_candidates']} candidates)")
    for d in dets:
        b = d["box"]
        print(f"  {d['class_name']:<28} {d['score']:.4f}  "
              f"[{b[0]:8.2f} {b[1]:8.2f} {b[2]:8.2f} {b[3]:8.2f}]")
    print(f"  margins: {margins}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
