//! Measures how fast a bundle opens and verifies.
//!
//! ```text
//! cargo run -p tether-bundle --release --example verify_throughput -- /tmp/tp.bundle [MiB]
//! ```
//!
//! Writes a bundle of `MiB` (default 128) pseudo-random bytes in four
//! sections to the given path, then over 5 runs times `Bundle::open` in
//! lazy mode (header + manifest only), `Bundle::open` in eager mode (every
//! section CRC) and `Bundle::verify_all` (all CRCs, padding, SHA-256
//! digest), and prints min/median. The file is in the page cache, so this
//! measures checksum speed, not the disk. The file is removed afterwards.

use std::time::{Duration, Instant};

use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, Verify};

fn xorshift_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[0], v[v.len() / 2])
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: verify_throughput <path> [MiB, default 128]")?;
    let mib: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(128);

    let mut w = BundleWriter::new(IdentityDesc {
        name: "throughput".into(),
        family: "bench".into(),
        model_version: "1".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_unix_s: 0,
    });
    // Four sections of unequal size, none a multiple of 4096.
    let total = mib << 20;
    let sizes = [
        total / 2 + 123,
        total / 4 - 77,
        total / 8 + 5,
        total / 8 - 51,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        let kind = if i == 0 {
            SectionKind::TensorRtPlan
        } else {
            SectionKind::Blob
        };
        w.add_section(
            kind,
            &format!("s{i}"),
            None,
            xorshift_bytes(len, i as u64 + 1),
        )?;
    }
    let t = Instant::now();
    let summary = w.write(&path)?;
    drop(w);
    let write_time = t.elapsed();
    let len = summary.file_len;
    println!(
        "wrote {path}: {len} bytes ({:.1} MiB) in {} sections, {:.2} s ({:.2} GB/s incl. CRC + SHA-256 + fsync)",
        len as f64 / (1 << 20) as f64,
        summary.sections,
        write_time.as_secs_f64(),
        gbps(len, write_time)
    );

    const RUNS: usize = 5;
    let (mut lazy, mut eager, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        let b = Bundle::open(&path, Verify::Lazy)?;
        lazy.push(t.elapsed());
        let t = Instant::now();
        let report = b.verify_all()?;
        full.push(t.elapsed());
        assert_eq!(report.bytes_checked, len);
        drop(b);
        let t = Instant::now();
        let b = Bundle::open(&path, Verify::Eager)?;
        eager.push(t.elapsed());
        drop(b);
    }
    let (lmin, lmed) = stats(lazy);
    println!(
        "open(Lazy):      min {:>9.1} us  median {:>9.1} us  (header + manifest only)",
        lmin.as_secs_f64() * 1e6,
        lmed.as_secs_f64() * 1e6
    );
    let (emin, emed) = stats(eager);
    println!(
        "open(Eager):     best {:>6.2} GB/s  median {:>6.2} GB/s  (min {:.1} ms, median {:.1} ms; section CRCs)",
        gbps(len, emin),
        gbps(len, emed),
        emin.as_secs_f64() * 1e3,
        emed.as_secs_f64() * 1e3
    );
    let (fmin, fmed) = stats(full);
    println!(
        "verify_all:      best {:>6.2} GB/s  median {:>6.2} GB/s  (min {:.1} ms, median {:.1} ms; CRCs + padding + SHA-256)",
        gbps(len, fmin),
        gbps(len, fmed),
        fmin.as_secs_f64() * 1e3,
        fmed.as_secs_f64() * 1e3
    );
    std::fs::remove_file(&path)?;
    Ok(())
}
