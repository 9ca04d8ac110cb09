//! The bundle's self-test, in the shared format ([`tether_family::selftest`], section
//! `llm/selftest`): a prompt's token ids, the greedy tokens generated from them, so the
//! device the bundle is deployed on can check itself (`tether verify --self-test`).
//!
//! The reference payload ([`fn@reference`]) is llama.cpp's (llama-cpp-python 0.3.36) greedy
//! answer to the chat prompt "What is 17 * 23? Answer with the number only." on the pinned
//! SmolLM2-135M-Instruct Q4_1 GGUF, from `golden/chat.json` (written by
//! `golden/reference.py`): 46 prompt ids, 13 generated ids ending with `<|im_end|>`. The
//! shortest of the four golden answers that ends by itself: it checks the prompt pass, 13
//! decode steps and the end-of-generation rule in well under a second on a CPU. For any
//! other checkpoint no reference exists: the build host's greedy tokens for the same chat
//! (rendered by that checkpoint's template) are recorded instead, and the device then agrees
//! with the build host or not.
//!
//! Entries: input [`PROMPT_IDS`] (u32 `[n]`), expected [`GENERATED_IDS`] (u32 `[m]`, the
//! end-of-generation id last when generation stopped by itself). The comparison is exact:
//! every generated id equal (greedy decoding has no tolerance: one different argmax changes
//! every later token).

use tether_family::selftest::{Check, Report, Role, SelfTest, SelfTestError, Values};

use crate::FAMILY;
use crate::error::LlmError;
use crate::generate::{GenerateError, GenerateParams, Generator, Prompt};
use crate::template::ChatMessage;

/// Input entry: the prompt's token ids.
pub const PROMPT_IDS: &str = "prompt_ids";
/// Expected entry: the greedy tokens generated from them.
pub const GENERATED_IDS: &str = "generated_ids";
/// Most prompt ids a self-test may hold.
pub const MAX_PROMPT_IDS: usize = 4096;
/// Most generated ids a self-test may hold.
pub const MAX_GENERATED_IDS: usize = 256;
/// Index of the self-test's chat in `golden/chat.json`.
const GOLDEN_CHAT: usize = 2;
/// SHA-256 of the pinned GGUF (`tests/assets.sha256`): the file the golden belongs to.
pub const PINNED_GGUF_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

const GOLDEN_JSON: &str = include_str!("../golden/chat.json");

fn bad(what: impl Into<String>) -> LlmError {
    LlmError::SelfTest(SelfTestError::Malformed(what.into()))
}

fn ids(v: &serde_json::Value, key: &str) -> Result<Vec<u32>, LlmError> {
    v[key]
        .as_array()
        .ok_or_else(|| bad(format!("golden chat.json has no `{key}`")))?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(format!("`{key}` holds {x}, not a token id")))
        })
        .collect()
}

/// A payload: `prompt` ids, the `generated` ids expected from them, and where those come
/// from.
pub fn payload(prompt: Vec<u32>, generated: Vec<u32>, source: String) -> SelfTest {
    SelfTest::new(source)
        .with(
            Role::Input,
            PROMPT_IDS,
            &[prompt.len() as u32],
            Values::U32(prompt),
        )
        .with(
            Role::Expected,
            GENERATED_IDS,
            &[generated.len() as u32],
            Values::U32(generated),
        )
}

/// The golden chat of the self-test: its messages.
///
/// # Errors
/// [`LlmError::SelfTest`] if the embedded JSON is malformed (a build defect).
pub fn reference_chat() -> Result<Vec<ChatMessage>, LlmError> {
    let v: serde_json::Value =
        serde_json::from_str(GOLDEN_JSON).map_err(|e| bad(format!("golden JSON: {e}")))?;
    v["chats"][GOLDEN_CHAT]["messages"]
        .as_array()
        .ok_or_else(|| bad("golden chat.json has no messages"))?
        .iter()
        .map(|m| {
            Ok(ChatMessage::new(
                m["role"]
                    .as_str()
                    .ok_or_else(|| bad("message without role"))?,
                m["content"]
                    .as_str()
                    .ok_or_else(|| bad("message without content"))?,
            ))
        })
        .collect()
}

/// The committed reference payload (llama.cpp's greedy tokens on the pinned GGUF).
///
/// # Errors
/// [`LlmError::SelfTest`] if the embedded JSON is malformed (a build defect).
pub fn reference() -> Result<SelfTest, LlmError> {
    let v: serde_json::Value =
        serde_json::from_str(GOLDEN_JSON).map_err(|e| bad(format!("golden JSON: {e}")))?;
    let chat = &v["chats"][GOLDEN_CHAT];
    let t = payload(
        ids(chat, "prompt_ids")?,
        ids(chat, "generated_ids")?,
        format!(
            "llama.cpp ({}) greedy tokens on {} (families/llm/golden/chat.json)",
            v["reference"].as_str().unwrap_or("?"),
            v["model"].as_str().unwrap_or("?")
        ),
    );
    input(&t)?;
    Ok(t)
}

/// The test's prompt and expected ids, checked: 1 to [`MAX_PROMPT_IDS`] prompt ids, 1 to
/// [`MAX_GENERATED_IDS`] expected ids.
///
/// # Errors
/// [`LlmError::SelfTest`] naming the entry and the count seen.
pub fn input(test: &SelfTest) -> Result<(&[u32], &[u32]), LlmError> {
    let prompt = test.u32s(Role::Input, PROMPT_IDS)?;
    let expected = test.u32s(Role::Expected, GENERATED_IDS)?;
    if prompt.is_empty() || prompt.len() > MAX_PROMPT_IDS {
        return Err(bad(format!(
            "{} prompt ids (1 to {MAX_PROMPT_IDS})",
            prompt.len()
        )));
    }
    if expected.is_empty() || expected.len() > MAX_GENERATED_IDS {
        return Err(bad(format!(
            "{} expected ids (1 to {MAX_GENERATED_IDS})",
            expected.len()
        )));
    }
    Ok((prompt, expected))
}

/// Run `test` on `generator`: greedy decoding of the prompt ids, as many tokens as expected
/// (fewer when an end-of-generation token comes first), compared id by id.
///
/// # Errors
/// [`GenerateError::Checkpoint`] with [`LlmError::SelfTest`] for a test lacking an entry;
/// the generator's errors (a prompt longer than its context, an id beyond the vocabulary).
pub fn run(generator: &mut Generator, test: &SelfTest) -> Result<Report, GenerateError> {
    let (prompt, expected) = input(test)?;
    let (_, done) = generator.generate_text(
        Prompt::Tokens(prompt),
        &GenerateParams::greedy(expected.len()),
    )?;
    #[allow(unused_mut)]
    let mut report = compare(test, &done.tokens, expected);
    #[cfg(feature = "cuda")]
    if let Some(d) = generator.gpu() {
        report.summary = report.summary.replace(
            ", CPU)",
            &format!(", GPU {}: one CUDA graph per token)", d.device_name()),
        );
    }
    Ok(report)
}

/// The report of generated ids `got` against `expected`: passed when equal.
pub fn compare(test: &SelfTest, got: &[u32], expected: &[u32]) -> Report {
    let same = got.iter().zip(expected).take_while(|(a, b)| a == b).count();
    let exact = got == expected;
    let mut summary = format!(
        "{same} of {} greedy tokens equal (prompt of {} tokens, CPU)",
        expected.len(),
        test.u32s(Role::Input, PROMPT_IDS).map_or(0, <[u32]>::len)
    );
    if !exact {
        summary.push_str(&format!(
            "; first difference at token {same}: {} instead of {}",
            got.get(same).map_or("nothing".into(), u32::to_string),
            expected.get(same).map_or("nothing".into(), u32::to_string)
        ));
    }
    let check = Check::at_least(
        "greedy tokens equal to the expected ones",
        same as f64,
        expected.len() as f64,
    );
    Report::new(FAMILY, test, exact, vec![check], summary)
}

/// The self-test a recipe embeds: the reference when the checkpoint is the pinned GGUF
/// (`pinned`; it must pass on the build host, else [`LlmError::ReferenceMismatch`]), else
/// the build host's greedy tokens for the same chat rendered by the checkpoint's template
/// (its raw text when it has none), up to as many tokens as the reference.
///
/// # Errors
/// [`LlmError::ReferenceMismatch`]; the generator's errors.
pub fn for_recipe(
    pinned: bool,
    generator: &mut Generator,
) -> Result<(SelfTest, Report), GenerateError> {
    let reference = reference()?;
    tether_family::selftest::for_recipe(
        pinned,
        reference,
        generator,
        run,
        |g, reference| {
            let max = input(&reference)?.1.len();
            let chat = reference_chat()?;
            let prompt = if has_template(g) {
                g.tokenize(Prompt::Chat(&chat))?
            } else {
                let text = chat.iter().map(|m| m.content.as_str()).collect::<Vec<_>>();
                g.tokenize(Prompt::Text(&text.join("\n")))?
            };
            let (_, done) =
                g.generate_text(Prompt::Tokens(&prompt), &GenerateParams::greedy(max))?;
            Ok(payload(
                prompt,
                done.tokens,
                "tether-llm's CPU engine at build time (not the pinned SmolLM2-135M-Instruct Q4_1 GGUF: no llama.cpp reference for it)".into(),
            ))
        },
        |report| GenerateError::Checkpoint(LlmError::ReferenceMismatch(Box::new(report))),
    )
}

fn has_template(g: &Generator) -> bool {
    g.tokenize(Prompt::Chat(&[ChatMessage::new("user", "x")]))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_llama_cpps_answer_and_any_difference_fails() {
        let t = reference().expect("golden");
        let (prompt, expected) = input(&t).expect("entries");
        assert_eq!((prompt.len(), expected.len()), (46, 13));
        // `<|im_end|>` (id 2) ends llama.cpp's answer.
        assert_eq!(expected.last(), Some(&2));
        assert!(t.source.contains("llama.cpp"), "{}", t.source);
        let r = compare(&t, expected, expected);
        assert!(r.passed, "{r}");
        let mut other = expected.to_vec();
        other[5] += 1;
        let r = compare(&t, &other, expected);
        assert!(!r.passed);
        assert!(
            r.summary.contains("5 of 13") && r.summary.contains("at token 5"),
            "{r}"
        );
        // Stopping early is a difference too.
        let r = compare(&t, &expected[..12], expected);
        assert!(
            !r.passed && r.summary.contains("nothing instead of 2"),
            "{r}"
        );
        // A payload without its expected entry is named.
        let bare = SelfTest::new("x").with(Role::Input, PROMPT_IDS, &[1], Values::U32(vec![1]));
        assert!(
            input(&bare)
                .unwrap_err()
                .to_string()
                .contains(GENERATED_IDS)
        );
    }
}
