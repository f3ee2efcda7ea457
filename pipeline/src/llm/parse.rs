//! Tolerant parsing of JSON answers: models wrap JSON in code fences, add prose around it,
//! leave trailing commas or comments, use smart quotes, break lines inside strings. This repairs what changes no content
//! and says precisely what could not be read. An answer that stops in the middle of its JSON is
//! never repaired into a shorter one: the elements after the cut would be lost without a trace,
//! so it is an error (the caller asks again, and records a failure if that fails too).

use serde::de::DeserializeOwned;

/// Parses the first JSON object or array in `answer` as `T`, repairing fences, prose, trailing
/// commas, comments and smart quotes; an answer cut off before its JSON ends is an error.
pub fn parse_json<T: DeserializeOwned>(answer: &str) -> Result<T, String> {
    let Some((candidate, whole)) = json_candidate(answer) else {
        return Err("the answer contains no JSON object or array".into());
    };
    if !whole {
        return Err("the answer stops before its JSON ends (cut off): it is not read, so that nothing after the cut \
                    is silently lost"
            .into());
    }
    let first_error = match serde_json::from_str::<T>(candidate) {
        Ok(v) => return Ok(v),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return Err(format!("the JSON does not have the requested shape: {e}"));
        }
        Err(e) => e,
    };
    match serde_json::from_str::<T>(&clean(candidate)) {
        Ok(v) => Ok(v),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            Err(format!("the JSON does not have the requested shape: {e}"))
        }
        Err(_) => Err(format!("invalid JSON: {first_error}")),
    }
}

/// The tags that open a reasoning model's thinking at the start of its answer (DeepSeek-R1 and
/// its distillations, Qwen3, QwQ: `<think>`; others `<thinking>` or `<reasoning>`).
const REASONING_TAGS: [&str; 3] = ["think", "thinking", "reasoning"];

/// Splits a reasoning model's answer into (reasoning, answer): a block opened by one of
/// [`REASONING_TAGS`] at the start of the answer is the reasoning up to its closing tag; an
/// answer that holds `</think>` with no opening tag before it is reasoning up to there (chat
/// templates that put the opening tag in the prompt). An answer whose reasoning never closes is
/// all reasoning: it has no answer. Any other answer is returned whole, with no reasoning —
/// a `<think>` later in an answer is the answer's own text.
pub fn split_reasoning(content: &str) -> (&str, &str) {
    let trimmed = content.trim_start();
    for tag in REASONING_TAGS {
        let open = format!("<{tag}>");
        if trimmed.get(..open.len()).is_some_and(|start| start.eq_ignore_ascii_case(&open)) {
            let rest = &trimmed[open.len()..];
            let close = format!("</{tag}>");
            return match find_ignore_ascii_case(rest, &close) {
                Some(end) => (&rest[..end], rest[end + close.len()..].trim_start()),
                None => (rest, ""),
            };
        }
    }
    match find_ignore_ascii_case(content, "</think>") {
        Some(end) if find_ignore_ascii_case(&content[..end], "<think>").is_none() => {
            (&content[..end], content[end + "</think>".len()..].trim_start())
        }
        _ => ("", content),
    }
}

/// The byte offset of the first `needle` (ASCII) in `haystack`, ignoring ASCII case.
fn find_ignore_ascii_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack.as_bytes().windows(needle.len()).position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The text from the first `{` or `[` to its matching bracket, and whether that bracket was
/// found (false: the answer was cut off).
fn json_candidate(answer: &str) -> Option<(&str, bool)> {
    let start = answer.find(['{', '['])?;
    let s = &answer[start..];
    let mut depth = 0i32;
    for (i, c) in structure(s) {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&s[..=i], true));
                }
            }
            _ => {}
        }
    }
    Some((s, false))
}

/// The characters of JSON text that lie outside string literals (quotes excluded), with their
/// byte offsets.
fn structure(s: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else {
            out.push((i, c));
        }
    }
    out
}

/// Smart quotes outside strings become JSON quotes, `//` comments and trailing commas go,
/// control characters inside strings are escaped.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = s.chars().collect();
    let mut in_string = false;
    let mut smart = false;
    let mut escaped = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            match c {
                _ if escaped => {
                    escaped = false;
                    out.push(c);
                }
                '\\' => {
                    escaped = true;
                    out.push(c);
                }
                '"' if !smart => {
                    in_string = false;
                    out.push(c);
                }
                '”' | '“' if smart => {
                    in_string = false;
                    out.push('"');
                }
                '"' => out.push_str("\\\""),
                // A raw line break or tab inside a string (JSON wants it escaped): small models
                // write them even under a grammar.
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() && (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                _ => out.push(c),
            }
        } else {
            match c {
                '"' | '“' | '”' => {
                    out.push('"');
                    in_string = true;
                    smart = c != '"';
                }
                '/' if chars.get(i + 1) == Some(&'/') => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                    continue;
                }
                '}' | ']' => {
                    strip_trailing_comma(&mut out);
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        i += 1;
    }
    out
}

fn strip_trailing_comma(out: &mut String) {
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if out.ends_with(',') {
        out.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn reasoning_is_split_from_the_answer() {
        let cases = [
            // The block opened and closed at the start, any case, any of the tags.
            (
                "<think>The TARGET says {\"a\": 1}.</think>\n{\"items\": []}",
                "The TARGET says {\"a\": 1}.",
                "{\"items\": []}",
            ),
            ("  <Thinking>hmm</Thinking>Answer: Oslo", "hmm", "Answer: Oslo"),
            ("<reasoning>a\nb</reasoning>\n\nAnswer: no", "a\nb", "Answer: no"),
            // The opening tag was in the prompt (the chat template wrote it).
            ("Let me see. Answer: Bergen?\n</think>\n\nAnswer: Oslo", "Let me see. Answer: Bergen?\n", "Answer: Oslo"),
            // Reasoning that never closes: no answer.
            ("<think>still thinking", "still thinking", ""),
            // No reasoning: the answer whole, even with a tag later in it.
            ("Answer: the <think> tag [1]", "", "Answer: the <think> tag [1]"),
            ("Answer: Oslo <think>x</think>", "", "Answer: Oslo <think>x</think>"),
            ("{\"items\": []}", "", "{\"items\": []}"),
            ("", "", ""),
            // Not a char boundary where the tag would end: no panic, no reasoning.
            ("ééééé</thinkX", "", "ééééé</thinkX"),
        ];
        for (content, reasoning, answer) in cases {
            assert_eq!(split_reasoning(content), (reasoning, answer), "{content:?}");
        }
    }

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    struct Items {
        items: Vec<Item>,
    }
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    struct Item {
        statement: String,
        entities: Vec<String>,
    }

    fn items(answer: &str) -> Result<Vec<(String, usize)>, String> {
        parse_json::<Items>(answer).map(|v| v.items.into_iter().map(|i| (i.statement, i.entities.len())).collect())
    }

    #[test]
    fn fences_prose_trailing_commas_and_comments() {
        let answer = "Here you go:\n```json\n{\"items\": [\n  {\"statement\": \"A {b}\", \"entities\": [\"A\",],}, // one\n]}\n```\nHope it helps.";
        assert_eq!(items(answer).unwrap(), [("A {b}".to_owned(), 1)]);
    }

    #[test]
    fn line_breaks_and_tabs_inside_strings_are_escaped() {
        // As Gemma 3 270M wrote under llama.cpp's JSON grammar.
        let answer = "{\"items\": [{\"statement\": \"Held in Port Ellery.\n>>>\n\tTARGET:\u{1}\", \"entities\": []}]}";
        assert_eq!(items(answer).unwrap(), [("Held in Port Ellery.\n>>>\n\tTARGET:\u{1}".to_owned(), 0)]);
    }

    #[test]
    fn a_cut_answer_is_an_error_not_a_shorter_answer() {
        for answer in [
            "{\"items\": [{\"statement\": \"one\", \"entities\": []}, {\"statement\": \"tw",
            "{\"items\": [{\"statement\": \"one\", \"entities\": [\"x\", \"y\"",
            "```json\n{\"items\": [{\"statement\": \"one\", \"entities\": [\"x\"]},\n```",
        ] {
            assert!(items(answer).unwrap_err().contains("cut off"), "{answer}");
        }
    }

    #[test]
    fn smart_quotes_and_failures_are_explained() {
        assert_eq!(items("{“items”: []}").unwrap(), []);
        assert!(items("I could not find any items.").unwrap_err().contains("no JSON"));
        assert!(items("{\"items\": [{\"statement\": 3, \"entities\": []}]}").unwrap_err().contains("shape"));
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn item() -> impl Strategy<Value = Item> {
            (any::<String>(), prop::collection::vec("\\PC{0,12}", 0..4))
                .prop_map(|(statement, entities)| Item { statement, entities })
        }

        fn to_json(items: &[Item]) -> String {
            let items: Vec<serde_json::Value> =
                items.iter().map(|i| serde_json::json!({"statement": i.statement, "entities": i.entities})).collect();
            serde_json::json!({ "items": items }).to_string()
        }

        proptest! {
            #![proptest_config(crate::fuzz_config())]

            #[test]
            fn fuzz_any_answer_parses_or_says_why(answer in any::<String>()) {
                if let Err(why) = parse_json::<serde_json::Value>(&answer) {
                    prop_assert!(!why.is_empty());
                }
                let _ = parse_json::<Items>(&answer);
            }

            #[test]
            fn fuzz_wrapped_answers_give_back_their_items(
                items in prop::collection::vec(item(), 0..6),
                before in "[A-Za-z .:\n]{0,40}",
                after in "[A-Za-z .:\n]{0,40}",
                fenced in any::<bool>(),
                trailing_comma in any::<bool>(),
            ) {
                let mut json = to_json(&items);
                if trailing_comma {
                    // `…}, ]}`: the list's closing bracket is the last `]` of the answer.
                    let end = json.rfind(']').unwrap_or_default();
                    json.insert_str(end, ", ");
                }
                let answer = if fenced { format!("{before}\n```json\n{json}\n```\n{after}") } else { format!("{before}{json}{after}") };
                prop_assert_eq!(parse_json::<Items>(&answer).map(|v| v.items), Ok(items));
            }

            #[test]
            fn fuzz_a_cut_answer_is_never_read_as_a_shorter_one(items in prop::collection::vec(item(), 1..6), cut in 0.0f64..1.0) {
                let json = to_json(&items);
                let mut at = (json.len() as f64 * cut) as usize;
                while !json.is_char_boundary(at) {
                    at -= 1;
                }
                prop_assert!(parse_json::<Items>(&json[..at]).is_err());
            }
        }
    }
}
