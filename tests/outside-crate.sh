#!/usr/bin/env bash
# A Rust project outside this workspace depends on the facade crate the way a user's
# project would (docs/rust.md, "Use from another Rust project"): `tether-rt` by path, default
# features off, the tract CPU backend only. It opens a detection bundle built from
# 320n.onnx, detects in astronaut.png and prints JSON; the detections must equal
# `tether run --json --device cpu` on the same bundle and image.
#
# The project is written to a temporary folder (deleted at exit) with the workspace's
# Cargo.lock, toolchain pin and release profile, and built into the workspace's target
# folder (CARGO_TARGET_DIR), so the dependencies `cargo test --workspace --release` built
# are reused: only the tether crates compile again (fewer features), ~30 s here instead of
# ~19 min (see the feature lines below). Needs the CLI (target/release/tether), python3
# and the assets (tests/fetch-assets; TETHER_ASSETS overrides <repo>/.assets).
#
#   TETHER_OUTSIDE_STANDALONE=1   no reuse: no extra feature lines, a target folder of its own
#   TETHER_OUTSIDE_CARGO_FLAGS    flags of the project's `cargo build` (default --quiet)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
assets=${TETHER_ASSETS:-$repo/.assets}
cli=$target/release/tether
[[ -x $cli ]] || { echo "outside-crate: $cli is missing (cargo build --release --bin tether)" >&2; exit 1; }
for f in 320n.onnx astronaut.png; do
  [[ -f $assets/$f ]] || { echo "outside-crate: $assets/$f is missing (tests/fetch-assets)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tether-outside.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
app=$tmp/outside-app
mkdir -p "$app/src"
# Same dependency versions and toolchain as the workspace: its builds are reused.
cp "$repo/Cargo.lock" "$repo/rust-toolchain.toml" "$app/"
cat >"$app/Cargo.toml" <<EOF
[package]
name = "tether-outside-app"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
# As docs/rust.md says: the library is \`tether\` whatever the package is called.
tether-rt = { path = "$repo", default-features = false, features = ["tract-cpu"] }
serde_json = "1"
EOF
image_features='"png"'
if [[ ${TETHER_OUTSIDE_STANDALONE:-0} != 1 ]]; then
  # Build reuse only. `cargo test --workspace --release` (tests/run) turns these features of
  # shared dependencies on (the CLI, the CUDA bindings, dev-dependencies). A compiled
  # crate's features are part of its identity: without them here, log, libc, half, syn and
  # everything above them (all of tract) compile again for this project, 1115 s on the
  # 2-core development machine. Found by comparing the unit graphs (`cargo +nightly test
  # --workspace --release --no-run --unit-graph -Z unstable-options` against this project's
  # `build --unit-graph`): with these lines every third-party unit's features are the
  # workspace's. If this step gets slow after a dependency change, compare them again.
  # Third-party features only, never a tether one; TETHER_OUTSIDE_STANDALONE=1 leaves them
  # out and builds in a target folder of its own, proving that the facade's manifests name
  # every feature it needs.
  cat >>"$app/Cargo.toml" <<'EOF'
half = { version = "2", features = ["rand_distr", "num-traits"] }
libc = { version = "0.2", features = ["extra_traits"] }
log = { version = "0.4", features = ["std"] }
once_cell = { version = "1", default-features = false, features = ["std", "race"] }
rustix = "1"

# A proc-macro's syn, as the workspace's (build dependencies are compiled for the host).
[build-dependencies]
syn = { version = "3", features = ["full"] }
EOF
  echo 'fn main() {}' >"$app/build.rs"
  image_features='"png", "jpeg"'
fi
cat >>"$app/Cargo.toml" <<EOF

[dependencies.image]
version = "0.25"
default-features = false
features = [$image_features]

# Its own workspace: never a member of one above the temporary folder.
[workspace]

EOF
# The workspace's release profile, for the same reason (build reuse): a profile that states
# `debug = false` hashes differently from one that leaves it at its default.
sed -n '/^\[profile\.release\]/,/^\[/p' "$repo/Cargo.toml" | sed '$d' >>"$app/Cargo.toml"
cat >"$app/src/main.rs" <<'EOF'
//! Opens a detection bundle, detects in one PNG, prints the detections as JSON
//! (`class_id`, `class_name`, `score`, `box` = [x1, y1, x2, y2] in source pixels).
use tether::detect::{Detector, ImageView, PixelFormat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bundle, png] = args.as_slice() else {
        return Err("usage: tether-outside-app BUNDLE IMAGE.png".into());
    };
    let mut detector = Detector::load(bundle)?;
    let frame = image::open(png)?.to_rgb8();
    let view = ImageView::new(frame.as_raw(), frame.width(), frame.height(), PixelFormat::Rgb8)?;
    let labels = detector.labels().to_vec();
    let detections: Vec<_> = detector
        .detect(&view)?
        .iter()
        .map(|d| {
            let b = d.bbox;
            serde_json::json!({
                "class_id": d.class_id,
                "class_name": labels.get(usize::from(d.class_id)),
                "score": d.score,
                "box": [b.x1, b.y1, b.x2, b.y2],
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(detections));
    Ok(())
}
EOF

if [[ ${TETHER_OUTSIDE_STANDALONE:-0} == 1 ]]; then
  target_app=$tmp/target
else
  target_app=$target
fi
t0=$SECONDS
(cd "$app" && CARGO_TARGET_DIR=$target_app cargo build --release ${TETHER_OUTSIDE_CARGO_FLAGS:---quiet})
echo "outside-crate: built the outside project in $((SECONDS - t0)) s" >&2

"$cli" build --family detect --onnx "$assets/320n.onnx" --input-size 320 -o "$tmp/detect.bundle" >/dev/null
"$target_app/release/tether-outside-app" "$tmp/detect.bundle" "$assets/astronaut.png" >"$tmp/app.json"
"$cli" run "$tmp/detect.bundle" "$assets/astronaut.png" --json --device cpu >"$tmp/cli.json"

python3 - "$tmp/app.json" "$tmp/cli.json" <<'EOF'
import json, sys
app = json.load(open(sys.argv[1]))
cli = json.load(open(sys.argv[2]))["results"][0]["result"]["detections"]
if not cli:
    sys.exit("outside-crate: the CLI found nothing on astronaut.png")
if len(app) != len(cli):
    sys.exit(f"outside-crate: {len(app)} detections from the outside project, {len(cli)} from the CLI")
for i, (a, c) in enumerate(zip(app, cli)):
    same = (a["class_id"] == c["class_id"] and a["class_name"] == c["class_name"]
            and abs(a["score"] - c["score"]) <= 1e-6
            and all(abs(x - y) <= 1e-3 for x, y in zip(a["box"], c["box"])))
    if not same:
        sys.exit(f"outside-crate: detection {i} differs: outside project {a}, CLI {c}")
print(f"outside-crate: {len(app)} detection{'' if len(app) == 1 else 's'} equal to tether run --json", file=sys.stderr)
EOF
