#!/usr/bin/env python3
"""Goldens for the OCR family from rapidocr-onnxruntime 1.4.4's own pipeline.

The reference is the package itself (`RapidOCR()` with its default
config.yaml: PP-OCRv4 det + rec, mobile v2.0 cls, onnxruntime CPU), pointed at
the model files fetched by `tests/fetch-assets`. Nothing here re-implements the
pipeline: the script calls the package's own stages in the order of
`RapidOCR.__call__` to record intermediate results, and asserts that the final
result equals one plain `RapidOCR()(path)` call.

Writes, for each image, `<stem>.json`:
  config      the constants the pipeline used, read from the package objects
  det         detector input shape, input checksum, probability-map samples,
              boxes after DB post-processing and sorting (det-image pixels)
  lines       every detected line: crop size, cls label/score, whether it was
              rotated, the recogniser's padded batch width, text and score
              (before the text-score filter)
  results     the package's final output: 4-point box (source pixels), text,
              score

`selftest.txt`: the bundle self-test (a crop of page.png cut by the
package's `get_crop_img_list`, with its classifier and recogniser answers),
and `geometry.json`: test vectors for the OpenCV / pyclipper primitives the
pipeline uses (resize INTER_LINEAR, warpPerspective INTER_CUBIC, dilate,
findContours, minAreaRect + boxPoints, pyclipper offset, the DB box score),
computed by those libraries on small deterministic inputs.

Usage:
    python reference.py --assets DIR --out-dir families/ocr/golden
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import sys
import tempfile

import cv2
import numpy as np
import onnxruntime
import pyclipper
import shapely
from PIL import Image

import rapidocr_onnxruntime
from rapidocr_onnxruntime import RapidOCR
from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

MODELS = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions() -> dict:
    return {
        "python": sys.version.split()[0],
        "rapidocr_onnxruntime": "1.4.4",
        "onnxruntime": onnxruntime.__version__,
        "opencv": cv2.__version__,
        "numpy": np.__version__,
        "pyclipper": pyclipper.__version__,
        "shapely": shapely.__version__,
        "pillow": Image.__version__,
    }


def make_engine(assets: str, threads: int | None) -> RapidOCR:
    kw = {f"{k}_model_path": os.path.join(assets, v) for k, v in MODELS.items()}
    if threads is not None:
        kw["intra_op_num_threads"] = threads
        kw["inter_op_num_threads"] = threads
    return RapidOCR(**kw)


def config_of(e: RapidOCR) -> dict:
    post = e.text_det.postprocess_op
    return {
        "max_side_len": e.max_side_len,
        "min_side_len": e.min_side_len,
        "min_height": e.min_height,
        "width_height_ratio": e.width_height_ratio,
        "text_score": e.text_score,
        "det_limit_side_len": e.text_det.limit_side_len,
        "det_limit_type": e.text_det.limit_type,
        "det_mean": list(e.text_det.mean),
        "det_std": list(e.text_det.std),
        "det_thresh": post.thresh,
        "det_box_thresh": post.box_thresh,
        "det_max_candidates": post.max_candidates,
        "det_unclip_ratio": post.unclip_ratio,
        "det_min_size": post.min_size,
        "det_use_dilation": post.dilation_kernel is not None,
        "det_score_mode": post.score_mode,
        "cls_image_shape": list(e.text_cls.cls_image_shape),
        "cls_batch_num": e.text_cls.cls_batch_num,
        "cls_thresh": e.text_cls.cls_thresh,
        "cls_labels": list(e.text_cls.postprocess_op.label_list),
        "rec_image_shape": list(e.text_rec.rec_image_shape),
        "rec_batch_num": e.text_rec.rec_batch_num,
        "rec_dictionary_size": len(e.text_rec.postprocess_op.character),
    }


def rec_batch_widths(e: RapidOCR, crops: list) -> list[int]:
    """The padded width each crop is recognised at: TextRecognizer.__call__'s
    grouping (stable order by aspect ratio, batches of rec_batch_num, width
    int(imgH * max(imgW / imgH, max ratio in the batch)))."""
    rec = e.text_rec
    ratios = [c.shape[1] / float(c.shape[0]) for c in crops]
    order = np.argsort(np.array(ratios))
    _, img_h, img_w = rec.rec_image_shape[:3]
    out = [0] * len(crops)
    for beg in range(0, len(crops), rec.rec_batch_num):
        idx = order[beg : beg + rec.rec_batch_num]
        m = max([img_w / img_h] + [ratios[i] for i in idx])
        for i in idx:
            out[int(i)] = int(img_h * m)
    return out


def run_image(e: RapidOCR, path: str) -> dict:
    """One image through the package's stages, in RapidOCR.__call__ order."""
    img = e.load_img(path)
    raw_h, raw_w = img.shape[:2]
    op_record = {}
    img, ratio_h, ratio_w = e.preprocess(img)
    op_record["preprocess"] = {"ratio_h": ratio_h, "ratio_w": ratio_w}
    img, op_record = e.maybe_add_letterbox(img, op_record)

    # Detector, stage by stage (TextDetector.__call__).
    det = e.text_det
    pre = det.get_preprocess(max(img.shape[0], img.shape[1]))
    x = pre(img)
    prob = det.infer(x)[0]
    boxes, scores = det.postprocess_op(prob, img.shape[:2])
    boxes = det.filter_tag_det_res(boxes, img.shape[:2])
    dt_boxes = e.sorted_boxes(boxes)
    p = prob[0, 0]
    h, w = p.shape
    samples = [(y, xx) for y in (0, h // 3, h // 2, 2 * h // 3, h - 1) for xx in (0, w // 4, w // 2, 3 * w // 4, w - 1)]

    crops = e.get_crop_img_list(img, dt_boxes)
    crop_sizes = [[int(c.shape[1]), int(c.shape[0])] for c in crops]
    widths = rec_batch_widths(e, copy.deepcopy(crops))
    rotated_crops, cls_res, _ = e.text_cls(crops)
    rotated = [bool(not np.array_equal(a, b)) for a, b in zip(crops, rotated_crops)]
    rec_res, _ = e.text_rec(rotated_crops)
    origin = e._get_origin_points(dt_boxes, op_record, raw_h, raw_w)
    final, _ = e.get_final_res(origin, cls_res, rec_res, 0.0, 0.0, 0.0)

    # The plain call must give the same answer.
    plain, _ = e(path)
    assert json.dumps(final, default=float) == json.dumps(plain, default=float), (final, plain)

    return {
        "image_size": [raw_w, raw_h],
        "preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w, "padding": op_record["padding_1"]},
        "det": {
            "image_size": [int(img.shape[1]), int(img.shape[0])],
            "input_shape": list(x.shape),
            "input_checksum": math.fsum(x.astype(np.float64).ravel().tolist()),
            "prob_shape": list(prob.shape),
            "prob_samples": [[y, xx, float(p[y, xx])] for y, xx in samples],
            "prob_sum": math.fsum(p.astype(np.float64).ravel().tolist()),
            "boxes": [np.asarray(b).astype(float).tolist() for b in dt_boxes],
        },
        "lines": [
            {
                "box": np.asarray(dt_boxes[i]).astype(float).tolist(),
                "crop_size": crop_sizes[i],
                "cls_label": cls_res[i][0],
                "cls_score": float(cls_res[i][1]),
                "rotated": rotated[i],
                "rec_width": widths[i],
                "text": rec_res[i][0],
                "score": float(rec_res[i][1]),
            }
            for i in range(len(dt_boxes))
        ],
        "results": [
            {"box": [[float(v) for v in pt] for pt in r[0]], "text": r[1], "score": float(r[2])}
            for r in (final or [])
        ],
    }


# ---------------------------------------------------------------- self-test

# "Region-based" on page.png's title line; aspect ratio 6.65 < 320 / 48, so
# the reference pads it to the minimum width 320 (a bucket in every config).
SELFTEST_BOX = [[7, 12], [140, 13], [140, 32], [7, 32]]


def write_selftest(e: RapidOCR, assets: str, dst: str) -> None:
    img = e.load_img(os.path.join(assets, "page.png"))
    crops = e.get_crop_img_list(img, [np.array(SELFTEST_BOX, np.float32)])
    crop = crops[0]
    width = rec_batch_widths(e, crops)[0]
    turned, cls_res, _ = e.text_cls(copy.deepcopy(crops))
    rec_res, _ = e.text_rec(turned)
    label = e.text_cls.postprocess_op.label_list.index(cls_res[0][0])
    lines = [
        "# OCR bundle self-test: written by golden/reference.py (rapidocr-onnxruntime 1.4.4).",
        f"# Crop of page.png at {SELFTEST_BOX} by RapidOCR.get_crop_img_list; answers from",
        "# TextClassifier / TextRecognizer on that crop alone. pixels: BGR, rows top to bottom.",
        f"rec_sha256 {sha256_file(os.path.join(assets, MODELS['rec']))}",
        f"cls_sha256 {sha256_file(os.path.join(assets, MODELS['cls']))}",
        f"width {crop.shape[1]}",
        f"height {crop.shape[0]}",
        f"rec_width {width}",
        f"cls_label {label}",
        f"cls_score {float(cls_res[0][1])!r}",
        f"score {float(rec_res[0][1])!r}",
        f"text {rec_res[0][0]}",
        f"pixels {hexbytes(crop)}",
    ]
    with open(dst, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{dst}: {rec_res[0][0]!r} score {rec_res[0][1]:.6f}, cls {cls_res[0]}")


# ---------------------------------------------------------------- geometry

def hexbytes(a: np.ndarray) -> str:
    return np.ascontiguousarray(a).astype(np.uint8).tobytes().hex()


def blob_bitmap(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A binary image with rectangles, rotated bars, a ring (hole) and noise."""
    m = np.zeros((h, w), np.uint8)
    for _ in range(6):
        x0, y0 = rng.integers(0, w - 8), rng.integers(0, h - 5)
        m[y0 : y0 + rng.integers(2, 6), x0 : x0 + rng.integers(3, 20)] = 1
    for _ in range(3):
        c = (float(rng.uniform(8, w - 8)), float(rng.uniform(6, h - 6)))
        box = cv2.boxPoints((c, (float(rng.uniform(8, 30)), float(rng.uniform(2, 6))), float(rng.uniform(-60, 60))))
        cv2.fillPoly(m, [np.round(box).astype(np.int32)], 1)
    cv2.rectangle(m, (w // 2 - 6, h // 2 - 4), (w // 2 + 6, h // 2 + 4), 1, 2)
    noise = rng.random((h, w)) < 0.01
    m[noise] = 1
    m[0, 0:3] = 1
    m[h - 1, w - 2] = 1
    return m


def geometry_vectors() -> dict:
    rng = np.random.default_rng(20261130)
    out: dict = {}

    # cv2.resize INTER_LINEAR, u8, 3 channels (up, down, exact 2x down, mixed).
    src = rng.integers(0, 256, (13, 19, 3), dtype=np.uint8)
    out["resize"] = {
        "src_size": [19, 13],
        "src": hexbytes(src),
        "cases": [
            {"size": [dw, dh], "dst": hexbytes(cv2.resize(src, (dw, dh)))}
            for dw, dh in [(47, 31), (40, 24), (9, 6), (10, 7), (19, 30), (5, 3), (41, 9)]
        ],
    }

    # cv2.warpPerspective INTER_CUBIC + BORDER_REPLICATE after
    # cv2.getPerspectiveTransform, as get_rotate_crop_image uses them.
    src = rng.integers(0, 256, (30, 48, 3), dtype=np.uint8)
    src = cv2.GaussianBlur(src, (5, 5), 0)
    cases = []
    for pts in [
        [[3, 4], [40, 6], [39, 17], [2, 15]],
        [[10, 2], [46, 20], [40, 29], [1, 12]],
        [[0, 0], [47, 0], [47, 29], [0, 29]],
        [[20, 5], [26, 5], [26, 25], [20, 25]],
    ]:
        p = np.array(pts, np.float32)
        cw = int(max(np.linalg.norm(p[0] - p[1]), np.linalg.norm(p[2] - p[3])))
        ch = int(max(np.linalg.norm(p[0] - p[3]), np.linalg.norm(p[1] - p[2])))
        std = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], np.float32)
        m = cv2.getPerspectiveTransform(p, std)
        dst = cv2.warpPerspective(src, m, (cw, ch), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
        cases.append({"points": pts, "size": [cw, ch], "matrix": m.ravel().tolist(), "dst": hexbytes(dst)})
    out["warp"] = {"src_size": [48, 30], "src": hexbytes(src), "cases": cases}

    # Bitmaps: dilate 2x2 then findContours(RETR_LIST, CHAIN_APPROX_SIMPLE).
    maps = []
    for h, w in [(24, 40), (40, 64)]:
        m = blob_bitmap(rng, h, w)
        d = cv2.dilate(m, np.array([[1, 1], [1, 1]]))
        contours, _ = cv2.findContours((d * 255).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        maps.append({
            "size": [w, h],
            "bitmap": hexbytes(m),
            "dilated": hexbytes(d),
            "contours": [c.reshape(-1, 2).tolist() for c in contours],
        })
    out["contours"] = maps

    # minAreaRect + boxPoints on integer point sets (contours and offsets are
    # integer), and the DB get_mini_boxes ordering.
    post = DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, score_mode="fast", use_dilation=True)
    rects = []
    for k in range(40):
        n = int(rng.integers(3, 12))
        if k % 4 == 0:  # axis-aligned rectangle corners (ties between calipers)
            x0, y0 = rng.integers(0, 50, 2)
            pts = np.array([[x0, y0], [x0 + rng.integers(1, 40), y0], [x0, y0 + rng.integers(1, 9)]], np.int32)
            pts = np.vstack([pts, [pts[1][0], pts[2][1]]])
        else:
            c = rng.uniform(10, 90, 2)
            ang = rng.uniform(0, math.pi)
            u = np.array([math.cos(ang), math.sin(ang)])
            v = np.array([-u[1], u[0]])
            pts = np.round(c + np.outer(rng.uniform(-25, 25, n), u) + np.outer(rng.uniform(-4, 4, n), v)).astype(np.int32)
        r = cv2.minAreaRect(pts)
        bp = cv2.boxPoints(r)
        mini, sside = post.get_mini_boxes(pts.reshape(-1, 1, 2))
        rects.append({
            "points": pts.tolist(),
            "center": [float(r[0][0]), float(r[0][1])],
            "size": [float(r[1][0]), float(r[1][1])],
            "angle": float(r[2]),
            "box_points": bp.astype(float).tolist(),
            "mini_box": mini.astype(float).tolist(),
            "short_side": float(sside),
        })
    out["min_area_rect"] = rects

    # DB unclip: shapely area/length -> distance -> pyclipper offset (JT_ROUND,
    # closed polygon), then get_mini_boxes again.
    offs = []
    for k in range(30):
        c = rng.uniform(20, 200, 2)
        ang = rng.uniform(-0.4, 0.4) if k % 3 else 0.0
        w, h = rng.uniform(4, 120), rng.uniform(3, 20)
        box = np.array(cv2.boxPoints(((float(c[0]), float(c[1])), (float(w), float(h)), math.degrees(ang))), np.float32)
        mini, _ = post.get_mini_boxes(np.round(box).astype(np.int32).reshape(-1, 1, 2))
        expanded = post.unclip(mini)
        box2, sside2 = post.get_mini_boxes(expanded)
        offs.append({
            "box": mini.astype(float).tolist(),
            "distance": float(shapely.geometry.Polygon(mini).area * 1.6 / shapely.geometry.Polygon(mini).length),
            "offset": expanded.reshape(-1, 2).tolist(),
            "mini_box": box2.astype(float).tolist(),
            "short_side": float(sside2),
        })
    out["unclip"] = offs

    # DB box score ("fast": mean of the map inside the filled box polygon).
    h, w = 30, 50
    pm = (rng.integers(0, 256, (h, w)).astype(np.float32) / np.float32(256.0)).astype(np.float32)
    scores = []
    for k in range(20):
        c = rng.uniform(0, [w, h])
        box = cv2.boxPoints(((float(c[0]), float(c[1])), (float(rng.uniform(2, 30)), float(rng.uniform(2, 10))), float(rng.uniform(-45, 45))))
        scores.append({"box": box.astype(float).tolist(), "score": float(DBPostProcess.box_score_fast(pm, box.reshape(-1, 2)))})
    out["box_score"] = {"size": [w, h], "map_u8": hexbytes((pm * 256).astype(np.uint8)), "cases": scores}
    return out


# ---------------------------------------------------------------- field inputs

def field_inputs(assets: str, field: str) -> list[tuple[str, str, int]]:
    """(name, image path, turns of 90 degrees) of the field golden: the field cases, the
    synthetic lines, and the reference's own test images upright and turned by 180."""
    out = []
    for name in sorted(os.listdir(field)):
        if name.startswith("ocr_") and name.endswith(".png"):
            out.append((name, os.path.join(field, name), 0))
    lines = os.path.join(field, "ocr_lines")
    for name in sorted(os.listdir(lines)):
        out.append((f"ocr_lines/{name}", os.path.join(lines, name), 0))
    for name in ["page.png", "text.png"]:
        out.append((f"{name}@180", os.path.join(assets, name), 2))
    return out


def field_golden(e: RapidOCR, assets: str, field: str) -> dict:
    """The package's final lines for every field input (an image turned by 180 degrees is
    written turned, in the mode it was read in, and read from that file)."""
    images = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, turns in field_inputs(assets, field):
            if turns:
                im = Image.open(path)
                path = os.path.join(tmp, os.path.basename(path))
                im.rotate(90 * turns).save(path)
            r = run_image(e, path)
            images[name] = {
                "turns": turns,
                "lines": [{"text": l["text"], "score": l["score"], "rec_width": l["rec_width"]} for l in r["lines"]],
                "results": r["results"],
            }
            print(f"{name}: " + " | ".join(x["text"] for x in r["results"]))
    return images


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--field", metavar="DIR",
                    help="write only field.json: the field inputs in DIR (tests/field)")
    args = ap.parse_args()

    e = make_engine(args.assets, None)
    if args.field:
        g = {
            "reference": "rapidocr-onnxruntime 1.4.4 RapidOCR() default config (onnxruntime CPU)",
            "versions": versions(),
            "images": field_golden(e, args.assets, args.field),
        }
        dst = os.path.join(args.out_dir, "field.json")
        with open(dst, "w", encoding="utf-8") as f:
            json.dump(g, f, indent=1, ensure_ascii=False)
            f.write("\n")
        return
    base = {
        "reference": "rapidocr-onnxruntime 1.4.4 RapidOCR() default config (onnxruntime CPU)",
        "versions": versions(),
        "models": {k: {"file": v, "sha256": sha256_file(os.path.join(args.assets, v))} for k, v in MODELS.items()},
        "config": config_of(e),
    }
    for name in ["page.png", "text.png"]:
        path = os.path.join(args.assets, name)
        g = dict(base)
        g["image"] = name
        g["image_sha256"] = sha256_file(path)
        g.update(run_image(e, path))
        dst = os.path.join(args.out_dir, os.path.splitext(name)[0] + ".json")
        with open(dst, "w", encoding="utf-8") as f:
            json.dump(g, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{dst}: {len(g['results'])} lines: " + " | ".join(r["text"] for r in g["results"]))

    write_selftest(e, args.assets, os.path.join(args.out_dir, "selftest.txt"))

    geo = {"reference": "OpenCV / pyclipper / shapely as used by rapidocr-onnxruntime 1.4.4", "versions": versions()}
    geo.update(geometry_vectors())
    dst = os.path.join(args.out_dir, "geometry.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(geo, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{dst}: {os.path.getsize(dst)} bytes")


if __name__ == "__main__":
    main()
