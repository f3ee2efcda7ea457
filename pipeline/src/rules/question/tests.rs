//! The question reader, tested on questions and sentences of our own.

mod chains;

use std::collections::HashSet;

use super::asked::*;
use super::dates::*;
use super::facts::*;
use super::spans::*;
use super::*;

fn sentences<'a>(texts: &[&'a str]) -> Vec<Sentence<'a>> {
    texts.iter().enumerate().map(|(i, t)| Sentence { text: t, score: 10.0 - i as f32, group: i }).collect()
}

/// Sentences of one passage, in order.
fn passage<'a>(texts: &[&'a str]) -> Vec<Sentence<'a>> {
    sentences(texts).into_iter().map(|s| Sentence { group: 0, ..s }).collect()
}

#[test]
fn questions_say_what_they_ask_for() {
    assert_eq!(asked("Who chairs the Velda Basin Authority?"), Some(Asked::Person));
    assert_eq!(asked("Under whose chairmanship did the talks begin?"), Some(Asked::Person));
    assert_eq!(asked("By whom was the weir built?"), Some(Asked::Person));
    assert_eq!(asked("When did Quint sign the compact?"), Some(Asked::Date));
    assert_eq!(asked("What is the place of birth of the singer of Copper Lanterns?"), Some(Asked::Place));
    assert_eq!(asked("Where did the author of Salt Roads study?"), Some(Asked::Institution));
    assert_eq!(asked("Where does Mira Oduya's father work at?"), Some(Asked::Institution));
    assert_eq!(asked("Where did Mira Oduya die?"), Some(Asked::Place));
    assert_eq!(asked("How many tiers does the compact define?"), Some(Asked::Number));
    assert_eq!(asked("What did the drainage cost the board?"), Some(Asked::Number));
    let cost: HashSet<String> = ["drainage", "cost", "board"].map(String::from).into();
    assert!(holds(&Asked::Number, "By 2012 the board spent 210,000 pounds a year.", &cost));
    assert!(holds(&Asked::Number, "The dam cost £4 million.", &cost));
    assert!(!holds(&Asked::Number, "The board met eight times in 2012.", &cost), "a count is no cost");
    let count: HashSet<String> = ["meetings", "board"].map(String::from).into();
    assert!(holds(&Asked::Number, "The board met eight times in 2012.", &count));
    assert_eq!(asked("How long is the Orrin canal?"), Some(Asked::Number));
    assert_eq!(asked("Why did the composer of Night Ferry die?"), Some(Asked::Cause));
    assert_eq!(asked("Describe the drought compact."), None);
    assert_eq!(asked("Is the compact still in force?"), Some(Asked::Verify));
    assert!(!single_factoid("Who was Ada Brenn, and what did she build?"));
    assert!(!single_factoid("Who is Ada Brenn?"));
    assert!(single_factoid("Who is Ada Brenn's father?"));
    let Some(Asked::Choice { options, order, event, role }) =
        asked("Which film came out first, The Glass Orchard or Harbour Lights?")
    else {
        panic!("a choice")
    };
    assert_eq!(
        (options, order, event, role),
        (vec!["The Glass Orchard".to_owned(), "Harbour Lights".to_owned()], Order::Earliest, Event::Any, None)
    );
    let Some(Asked::Choice { order, event, role, .. }) =
        asked("Which film has the director who was born later, Salt Roads or The Quiet Mill?")
    else {
        panic!("a choice")
    };
    assert_eq!((order, event, role), (Order::Latest, Event::Birth, Some("director")));
    let Some(Asked::Choice { role, .. }) = asked("Which director was born first, Ilse Varga or Oren Castel?") else {
        panic!("a choice")
    };
    assert_eq!(role, None);
    let Some(Asked::Choice { options, order, .. }) = asked("Who lived longer, Ada Brenn or Tomas Wexley?") else {
        panic!("a choice")
    };
    assert_eq!((options, order), (vec!["Ada Brenn".to_owned(), "Tomas Wexley".to_owned()], Order::LongestLife));
    let Some(Asked::Choice { options, .. }) = asked("Who was born first out of Ada Brenn and Tomas Wexley?") else {
        panic!("a choice")
    };
    assert_eq!(options, ["Ada Brenn", "Tomas Wexley"]);
    assert_eq!(
        asked("Are Kelso Ford and Varn Hollow both located in the same country?"),
        Some(Asked::Same { subjects: vec!["Kelso Ford".into(), "Varn Hollow".into()] })
    );
    // One role written for both subjects is the role of each.
    let each =
        Some(Asked::Same { subjects: vec!["director of film Grey Tide".into(), "director of film Salt Roads".into()] });
    assert_eq!(asked("Do both directors of films Grey Tide and Salt Roads share the same nationality?"), each);
    assert_eq!(asked("Do both films: Grey Tide and Salt Roads have the directors from the same country?"), each);
    assert_eq!(asked("Are both directors of films Grey Tide and Salt Roads from the same country?"), each);
}

#[test]
fn choices_compare_the_dates_of_their_options() {
    let s = sentences(&[
        "The Glass Orchard is a 1961 drama produced by Mara Quill.",
        "Harbour Lights is a 1946 musical film.",
    ]);
    let a = short_answer("Which film came out first, The Glass Orchard or Harbour Lights?", &[], &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("Harbour Lights", 1));
    let a = short_answer("Which film came out later, The Glass Orchard or Harbour Lights?", &[], &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("The Glass Orchard", 0));
    let s = sentences(&[
        "Ada Brenn (born 12 June 1967) is a glassblower from Varn Hollow.",
        "Tomas Wexley (born 31 December 1942) is a cartographer.",
    ]);
    assert_eq!(
        short_answer("Who was born first out of Ada Brenn and Tomas Wexley?", &[], &s).unwrap().text,
        "Tomas Wexley"
    );
    assert_eq!(short_answer("Who was born later, Ada Brenn or Tomas Wexley?", &[], &s).unwrap().text, "Ada Brenn");
    // Life spans: birth to death.
    let s = sentences(&[
        "Ada Brenn (3 March 1901 – 9 May 1950) was a glassblower.",
        "Tomas Wexley (4 April 1910 – 1 January 1990) was a cartographer.",
    ]);
    assert_eq!(short_answer("Who lived longer, Ada Brenn or Tomas Wexley?", &[], &s).unwrap().text, "Tomas Wexley");
    // The directors' dates, through the sentences that name the directors.
    let s = sentences(&[
        "Salt Roads is a 1969 film directed by Ilse Varga.",
        "The Quiet Mill is a 1980 film directed by Oren Castel.",
        "Ilse Varga (15 July 1934 – 16 December 1977) was a film director.",
        "Oren Castel (born 29 July 1938) is a director.",
    ]);
    let a = short_answer("Which film has the director who was born earlier, The Quiet Mill or Salt Roads?", &[], &s)
        .unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("Salt Roads", 2));
    // Without one director's dates, the films' own years stand in for them.
    let s = sentences(&[
        "Salt Roads is a 1969 film directed by Ilse Varga.",
        "The Quiet Mill is a 1980 film directed by Oren Castel.",
        "Oren Castel (born 29 July 1938) is a director.",
    ]);
    let q = "Which film has the director who was born earlier, The Quiet Mill or Salt Roads?";
    assert_eq!(short_answer(q, &[], &s).unwrap().text, "Salt Roads");
    let q = "Which film has the director who died later, The Quiet Mill or Salt Roads?";
    assert_eq!(short_answer(q, &[], &s).unwrap().text, "The Quiet Mill");
    // Undecided without dates for both: no short answer.
    let s = sentences(&["Harbour Lights is a 1946 musical film."]);
    assert!(short_answer("Which film came out first, The Glass Orchard or Harbour Lights?", &[], &s).is_none());
    let s = sentences(&["Salt Roads is a 1969 film directed by Ilse Varga.", "The Quiet Mill is a film."]);
    let q = "Which film has the director who was born earlier, The Quiet Mill or Salt Roads?";
    assert!(short_answer(q, &[], &s).is_none());
}

#[test]
fn same_country_questions_compare_where_each_is() {
    let s = sentences(&[
        "Kelso Ford is a village in Dunmere County, Aldovia.",
        "Varn Hollow is a hamlet in the Teska district of Morrowland.",
    ]);
    assert_eq!(
        short_answer("Are Kelso Ford and Varn Hollow both located in the same country?", &[], &s).unwrap().text,
        "no"
    );
    let s = sentences(&["Salt Roads is a 2001 Aldovian mystery film.", "The Quiet Mill is a 2013 Aldovian drama."]);
    assert_eq!(
        short_answer("Are both Salt Roads and The Quiet Mill from the same country?", &[], &s).unwrap().text,
        "yes"
    );
    // Demonyms and country names are one country.
    let s = sentences(&["Ada Brenn (born 1950 in Lyon, France) is a potter.", "Tomas Wexley is a French sculptor."]);
    assert_eq!(short_answer("Are Ada Brenn and Tomas Wexley of the same nationality?", &[], &s).unwrap().text, "yes");
    // Through a relation: the films' directors.
    let s = passage(&[
        "Salt Roads is a 1969 film directed by Ilse Varga.",
        "The Quiet Mill is a 1980 film directed by Oren Castel.",
        "Ilse Varga was a Hungarian film director.",
        "Oren Castel is an Italian director.",
    ]);
    let q = "Are director of film Salt Roads and director of film The Quiet Mill from the same country?";
    assert_eq!(short_answer(q, &[], &s).unwrap().text, "no");
    // Nothing said about one of them: undecided.
    let s = sentences(&["Salt Roads is a 2001 Aldovian mystery film."]);
    assert!(short_answer("Are both Salt Roads and The Quiet Mill from the same country?", &[], &s).is_none());
}

#[test]
fn yes_or_no_questions_need_a_sentence_that_states_them() {
    let s =
        sentences(&["The festival was cancelled only twice, in 1987 and in 2020.", "It moved to the quay in 1990."]);
    let a = short_answer("Was the festival cancelled in 2020?", &[], &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("yes", 0));
    let entities = ["Harbour Lights Festival".to_owned()];
    assert_eq!(short_answer("Was the Harbour Lights Festival cancelled in 2020?", &entities, &s).unwrap().text, "yes");
    let s = sentences(&["The festival was not cancelled in 2020."]);
    assert_eq!(short_answer("Was the festival cancelled in 2020?", &[], &s).unwrap().text, "no");
    // Not stated either way: undecided.
    assert!(short_answer("Was the festival cancelled in 1995?", &[], &s).is_none());
}

#[test]
fn typed_questions_take_the_span_of_their_kind() {
    let s = sentences(&[
        "Copper Lanterns is a song by the singer Juno Pell and Rafe Ordway.",
        "Juniper Pellow (born December 8, 1982), known as Juno Pell, is a singer.",
        "Born in Saint Alder, Port Keswin, she was raised in Millbrook.",
    ]);
    let entities = ["Copper Lanterns".to_owned()];
    let a = short_answer("When was the singer of Copper Lanterns born?", &entities, &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("December 8, 1982", 1));
    let a = short_answer("Where was the singer of Copper Lanterns born?", &entities, &s).unwrap();
    assert_eq!(a.text, "Saint Alder");
    let s = sentences(&["The talks were chaired by Rafael Ortiz in 2009.", "The compact was signed in Aldermoor."]);
    assert_eq!(short_answer("Who chaired the talks?", &[], &s).unwrap().text, "Rafael Ortiz");
    assert_eq!(short_answer("In what year were the talks chaired?", &[], &s).unwrap().text, "2009");
    assert_eq!(short_answer("Where was the compact signed?", &[], &s).unwrap().text, "Aldermoor");
    let s =
        sentences(&["The trawler was lost on 27 October 1952 off Skerry Head.", "3,870 pupils visited it in 2023."]);
    assert_eq!(short_answer("In what year was the trawler lost?", &[], &s).unwrap().text, "1952");
    assert_eq!(short_answer("When was the trawler lost?", &[], &s).unwrap().text, "27 October 1952");
    assert_eq!(short_answer("How many pupils visited it?", &[], &s).unwrap().text, "3,870");
    let s = sentences(&["The compact defines 3 tiers of water rights."]);
    assert_eq!(short_answer("How many tiers does the compact define?", &[], &s).unwrap().text, "3");
    // A cause without when or at what age it struck.
    let s = sentences(&["He died of a heart attack in 1990."]);
    assert_eq!(short_answer("Why did he die?", &[], &s).unwrap().text, "a heart attack");
    let s = sentences(&["She died of tuberculosis in March 1917."]);
    assert_eq!(short_answer("Why did she die?", &[], &s).unwrap().text, "tuberculosis");
    let s = sentences(&["He died from a stroke at the age of 80."]);
    assert_eq!(short_answer("Why did he die?", &[], &s).unwrap().text, "a stroke");
    let s = sentences(&["He died of injuries sustained in battle."]);
    assert_eq!(short_answer("Why did he die?", &[], &s).unwrap().text, "injuries sustained in battle");
    // A compound nationality: its first part, the origin.
    let s = sentences(&["Ilse Varga (1901–1970) was an Austrian-American composer."]);
    assert_eq!(short_answer("What nationality is Ilse Varga?", &[], &s).unwrap().text, "Austrian");
    // Where someone studied or works: the institution, not the town it is in, nor the
    // office held in it.
    let s = sentences(&["Born in Tarnow, Kasia Brel studied painting at the Halden Academy of Arts."]);
    assert_eq!(short_answer("Where did Kasia Brel study?", &[], &s).unwrap().text, "Halden Academy of Arts");
    let s = sentences(&["Oren Vale was later President of Marlow College in Dunmere."]);
    assert_eq!(short_answer("Where did Oren Vale work?", &[], &s).unwrap().text, "Marlow College");
    let s = sentences(&["In Lisbon she worked for Tessaline Press until 1990."]);
    assert_eq!(short_answer("Where did she work?", &[], &s).unwrap().text, "Tessaline Press");
    // A span the question already holds is not an answer.
    let s = sentences(&["Rafael Ortiz chaired the talks."]);
    assert!(short_answer("Who did Rafael Ortiz meet?", &[], &s).is_none());
}

#[test]
fn offsets_survive_letters_whose_lowercase_is_longer() {
    assert_eq!(lowercase_in_place("İstanbul ÄB"), "İstanbul äb");
    let s = sentences(&["İlse Varga was born in İzmir on 3 May 1901 and died of a fever in Kırşehir."]);
    assert!(short_answer("When was İlse Varga born?", &["İlse Varga".to_owned()], &s).is_some());
    assert!(short_answer("Why did İlse Varga die?", &[], &s).is_some());
    assert!(short_answer("Where was the director of İzmir Nights born?", &["İzmir Nights".to_owned()], &s).is_some());
}

#[test]
fn names_match_with_middle_names_and_initials() {
    assert!(names_key("maria wisława anna szymborska was a poet", "wisława szymborska"));
    assert!(names_key("robert adolf stemmle was a director", "robert a stemmle"));
    assert!(names_key("tony lee bettenhausen jr was a driver", "tony bettenhausen jr"));
    assert!(!names_key("tony lee and the other bettenhausen", "tony bettenhausen"));
    assert!(!names_key("a stemmle film", "robert a stemmle"));
    assert!(!names_key("anything", ""));
}

mod fuzz {
    use proptest::prelude::*;

    use super::super::{Sentence, short_answer};

    /// Words that steer the reader (hops, cues, ranks, possessives, brackets, dates,
    /// states), with arbitrary text among them.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "Who",
                "Where",
                "When",
                "What",
                "is",
                "was",
                "the",
                "of",
                "father",
                "mother's",
                "wife",
                "son",
                "daughter",
                "paternal",
                "grandmother",
                "director",
                "film",
                "song",
                "by",
                "directed",
                "and",
                "born",
                "died",
                "in",
                "Ada",
                "Ivo",
                "Tann's",
                "Vell,",
                "2Nd",
                "Count",
                "Of",
                "Archduchess",
                "(Film)",
                "(1899–1977)'s",
                "He",
                "She",
                "married",
                "Pharaoh",
                "First",
                "Lady",
                "Winnipeg,",
                "Manitoba",
                "New",
                "York",
                "İstanbul",
                "ß",
                "’s",
                ",",
                "?",
                "(",
                ")",
                "–",
                "1 March 1918",
                "form",
                "a",
            ])
            .prop_map(str::to_owned),
            any::<String>(),
        ]
    }

    fn text(words: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(word(), 0..words).prop_map(|w| w.join(" "))
    }

    proptest! {
        #![proptest_config(crate::fuzz_config())]

        #[test]
        fn fuzz_any_question_over_any_evidence_is_answered_or_not(
            question in text(14),
            texts in prop::collection::vec(text(24), 0..6),
            entities in prop::collection::vec(text(4), 0..3),
        ) {
            let sentences: Vec<Sentence<'_>> = texts
                .iter()
                .enumerate()
                .map(|(i, t)| Sentence { text: t, score: i as f32, group: i / 2 })
                .collect();
            if let Some(short) = short_answer(&question, &entities, &sentences) {
                prop_assert!(short.sentence < sentences.len().max(1));
            }
        }
    }
}

#[test]
fn life_spans_date_and_place_a_birth_and_a_death() {
    let s = passage(&["Jory Vance (6 June 1906, Tallis – 2 November 1994, Le Marsh-Aubry) was a film director."]);
    let jory = ["Jory Vance".to_owned()];
    assert_eq!(short_answer("Where was Jory Vance born?", &jory, &s).unwrap().text, "Tallis");
    assert_eq!(short_answer("Where did Jory Vance die?", &jory, &s).unwrap().text, "Le Marsh-Aubry");
    assert_eq!(short_answer("When did Jory Vance die?", &jory, &s).unwrap().text, "2 November 1994");
    let s = sentences(&["Ada Quill (1697 – 10 January 1768) was a bishop."]);
    let ada = ["Ada Quill".to_owned()];
    assert_eq!(short_answer("What is the date of death of Ada Quill?", &ada, &s).unwrap().text, "10 January 1768");
    assert_eq!(short_answer("When was Ada Quill born?", &ada, &s).unwrap().text, "1697");
    // A people or a language after `in` is no place.
    let s = sentences(&[
        "Lio Marr, an American crooner, recorded the ballad in English and Spanish.",
        "Lio Marr grew up in Quellport.",
    ]);
    let lio = ["Lio Marr".to_owned()];
    assert_eq!(short_answer("Where was Lio Marr born?", &lio, &s).unwrap().text, "Quellport");
    // The sides of a life span, its hyphen told from one inside a name.
    let text = "Rafe Orr (1880- 1958) was a clerk of Arles (Saint-Loup, 1879), like Ned Orr (Arles- 2 May 1950).";
    let lives = read_sentence(text).1;
    assert_eq!(lives.len(), 2);
    assert_eq!(&text[lives[0].birth.clone()], "1880");
    assert_eq!(&text[lives[0].death.clone()], " 1958");
    assert_eq!(&text[lives[1].birth.clone()], "Arles");
}
