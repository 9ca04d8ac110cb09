//! The `llm` bundle: SmolLM2 (`tests/fetch-assets`) built from its GGUF, written atomically,
//! opened memory-mapped, read back tensor for tensor; bad bundles refused.

use std::sync::Arc;

use tether_bundle::{Bundle, Verify};
use tether_llm::Checkpoint;
use tether_llm::recipe::{BuildOptions, Input, build};

#[path = "common/mod.rs"]
mod common;

#[test]
fn smollm2_bundle_round_trips_zero_copy() {
    let gguf = common::asset(common::GGUF);
    let src = Checkpoint::from_gguf(&gguf).expect("gguf");
    let mut steps = Vec::new();
    let (writer, report) = build(
        &Input::detect(&gguf),
        &BuildOptions {
            name: "smollm2".into(),
            created_unix_s: 1,
            ..BuildOptions::default()
        },
        &mut |s| steps.push(s.to_owned()),
    )
    .expect("build");
    assert_eq!(steps.len(), 3);
    assert_eq!(report.tensors, 272);
    let d = &report.description;
    assert_eq!(d.architecture, "llama");
    assert_eq!(d.parameters, 134_515_008);
    assert_eq!(d.context_length, 8192);
    assert_eq!(d.vocabulary, 49152);
    assert!(d.chat_template);
    assert_eq!(d.bos, Some((1, "<|im_start|>".into())));
    assert_eq!(d.eos, Some((2, "<|im_end|>".into())));
    let text = d.to_string();
    assert!(
        text.contains("q4_1 x210") && text.contains("q8_0 x1") && text.contains("f32 x61 (35.1 K)"),
        "{text}"
    );
    println!("{text}");

    let dir = std::env::temp_dir().join(format!("tether-llm-bundle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("smollm2.bundle");
    writer.write(&path).expect("write");
    let bundle = Arc::new(Bundle::open(&path, Verify::Lazy).expect("open"));
    let back = Checkpoint::from_bundle(bundle.clone()).expect("read back");
    assert_eq!(back.config, src.config);
    assert_eq!(back.chat_template, src.chat_template);
    for (name, ty, dims) in src.weights.infos() {
        let a = src.weights.require(name).unwrap();
        let b = back.weights.require(name).unwrap();
        assert_eq!((b.ty, b.dims), (ty, dims), "{name}");
        assert!(a.data == b.data, "{name}: bytes differ");
        // Zero-copy: the tensor is the mapped section, page-aligned.
        assert_eq!(b.data.as_ptr() as usize % 4096, 0, "{name}");
        assert!(
            bundle.as_bytes().as_ptr_range().contains(&b.data.as_ptr()),
            "{name}"
        );
    }
    for text in ["Hello, world!", "<|im_start|>user\nhi<|im_end|>\n"] {
        assert_eq!(
            back.tokenizer.encode(text, true, true).unwrap(),
            src.tokenizer.encode(text, true, true).unwrap()
        );
    }
    // Checkpoint::open tells the three apart.
    assert_eq!(Checkpoint::open(&path).unwrap().config, src.config);
    assert_eq!(Checkpoint::open(&gguf).unwrap().config, src.config);
    std::fs::write(dir.join("x.txt"), b"hello").unwrap();
    let e = Checkpoint::open(dir.join("x.txt")).unwrap_err().to_string();
    assert!(e.contains("neither a GGUF file nor a bundle"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn corrupt_and_foreign_bundles_are_refused() {
    use tether_bundle::{BundleWriter, IdentityDesc, SectionKind};
    // Another family.
    let mut w = BundleWriter::new(IdentityDesc {
        name: "x".into(),
        family: "embed".into(),
        ..IdentityDesc::default()
    });
    w.add_section(SectionKind::FamilyConfig, "llm/config", None, vec![0; 192])
        .unwrap();
    let e = tether_llm::recipe::verify_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(e.to_string().contains("family is `embed`"), "{e}");
    // An llm bundle without its sections, then with a short config.
    let mut w = BundleWriter::new(IdentityDesc {
        name: "x".into(),
        family: "llm".into(),
        ..IdentityDesc::default()
    });
    let e = tether_llm::recipe::verify_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(e.to_string().contains("`llm/config`: missing"), "{e}");
    w.add_section(SectionKind::FamilyConfig, "llm/config", None, vec![1, 0, 0])
        .unwrap();
    let e = tether_llm::recipe::verify_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(e.to_string().contains("3 bytes, need 192"), "{e}");
}

#[test]
fn a_chat_template_that_cannot_render_a_chat_is_refused_at_build() {
    use tether_llm::gguf::Value;
    let dir = std::env::temp_dir().join(format!("tether-llm-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The recipe on the GGUF `w`, written into `dir` first.
    let build_of = |w: &tether_llm::gguf::GgufWriter| {
        let gguf = dir.join("t.gguf");
        std::fs::write(&gguf, w.to_bytes()).unwrap();
        build(
            &Input::detect(&gguf),
            &BuildOptions {
                name: "t".into(),
                created_unix_s: 1,
                ..BuildOptions::default()
            },
            &mut |_| {},
        )
        .map(|_| ())
    };
    for (template, want) in [
        (
            "{{ raise_exception('Conversation roles must alternate') }}",
            "does not render a one-message chat (",
        ),
        (
            "{{ undefined_thing.x }}",
            "does not render a one-message chat (",
        ),
        ("   ", "renders a one-message chat without the message"),
    ] {
        let mut w = tether_llm::testing::tiny_gguf(&tether_llm::testing::tiny_config());
        w.metadata
            .iter_mut()
            .find(|(k, _)| k == "tokenizer.chat_template")
            .expect("template")
            .1 = Value::String(template.into());
        let e = build_of(&w).expect_err(template).to_string();
        assert!(
            e.starts_with("chat template: ") && e.contains(want),
            "{template}: {e}"
        );
    }
    // The tiny model's own template renders: it builds.
    build_of(&tether_llm::testing::tiny_gguf(
        &tether_llm::testing::tiny_config(),
    ))
    .expect("a template that renders");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_context_too_small_for_the_self_test_is_named_at_build() {
    let dir = std::env::temp_dir().join(format!("tether-llm-ctx4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = tether_llm::testing::tiny_config();
    cfg.n_ctx_train = 4;
    let gguf = dir.join("t.gguf");
    std::fs::write(&gguf, tether_llm::testing::tiny_gguf(&cfg).to_bytes()).unwrap();
    let e = build(
        &Input::detect(&gguf),
        &BuildOptions {
            name: "t".into(),
            created_unix_s: 1,
            self_test: true,
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .map(|_| ())
    .expect_err("a 4-position context cannot hold the self-test's chat")
    .to_string();
    eprintln!("{e}");
    // The generator's own error (the prompt against the context), not a malformed section.
    assert!(
        e.starts_with("the build's self-test could not run on this CPU: ")
            && e.contains('4')
            && !e.contains("malformed"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
