//! Relation chains: questions that follow a relation through the context.

use super::super::asked::*;
use super::super::chains::*;
use super::super::dates::*;
use super::super::facts::*;
use super::super::*;
use super::{passage, sentences};

#[test]
fn chained_questions_follow_their_relations() {
    let one = |name: &str, hops: Vec<Hop>| vec![(name.to_owned(), hops)];
    assert_eq!(
        chain("Who is the paternal grandmother of Edda Lorne?", &["Edda Lorne".to_owned()]),
        one("Edda Lorne", vec![Hop::Father, Hop::Mother])
    );
    assert_eq!(
        chain(
            "What is the place of birth of the director of film Salt Roads (Film)?",
            &["Salt Roads (Film)".to_owned()]
        ),
        one("Salt Roads", vec![Hop::Role("director")])
    );
    assert_eq!(
        chain("Where was Edda Lorne's mother-in-law born?", &["Edda Lorne's".to_owned()]),
        one("Edda Lorne", vec![Hop::Spouse, Hop::Mother])
    );
    // The name comes from the question's words, whatever pieces of it the entity extractor
    // found; then the part before its comma, then without its rank.
    assert_eq!(
        chain("Where was the director of film The Long Way Of Tam Ory born?", &["Tam Ory".to_owned()]),
        one("The Long Way Of Tam Ory", vec![Hop::Role("director")])
    );
    assert_eq!(
        chain("Who is the child of the performer of song Rain (Oda Brenn Song)?", &["Oda Brenn Song".to_owned()]),
        one("Rain", vec![Hop::Role("performer"), Hop::Child])
    );
    assert_eq!(
        chain("Where did Archduke Aric, 2Nd Count Of Dunmere's father die?", &["Count Of Dunmere".to_owned()]),
        vec![
            ("Archduke Aric, 2Nd Count Of Dunmere".to_owned(), vec![Hop::Father]),
            ("Archduke Aric".to_owned(), vec![Hop::Father]),
            ("Aric, 2Nd Count Of Dunmere".to_owned(), vec![Hop::Father]),
        ]
    );
    let s = passage(&[
        "Salt Roads is a 1969 film directed by Ilse Varga and starring Tomas Wexley.",
        "Tomas Wexley was born in Kelso Ford.",
        "Ilse Varga (15 July 1934 – 16 December 1977) was a film director.",
        "She was born in Port of Aldra and died in Varn Hollow.",
    ]);
    let entities = ["Salt Roads".to_owned()];
    let a = short_answer("What is the place of birth of the director of film Salt Roads?", &entities, &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("Port of Aldra", 3));
    let a = short_answer("Where did the director of film Salt Roads die?", &entities, &s).unwrap();
    assert_eq!(a.text, "Varn Hollow");
    let a = short_answer("Who is the director of Salt Roads?", &entities, &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("Ilse Varga", 0));
    // The sentence that leads to the director dates and places the film, not her.
    let a = short_answer("When was the director of film Salt Roads born?", &entities, &s).unwrap();
    assert_eq!((a.text.as_str(), a.sentence), ("15 July 1934", 2));
    let s = passage(&[
        "Salt Roads is a 1969 American film directed by Ilse Varga.",
        "Ilse Varga (born 1934) is a Danish film director.",
    ]);
    let a = short_answer("What nationality is the director of film Salt Roads?", &entities, &s).unwrap();
    assert_eq!(a.text, "Danish");
    let s = sentences(&[
        "Edda Lorne was the daughter of Count Aric of Dunmere and Mira Solace.",
        "Count Aric of Dunmere was the son of Oswin Tallow and Berta Wend.",
        "Edda Lorne married Piet Sorrel in 1402.",
        "Piet Sorrel was the son of Jan Sorrel and Grete Hollin.",
    ]);
    let entities = ["Edda Lorne".to_owned()];
    assert_eq!(short_answer("Who is Edda Lorne's mother?", &entities, &s).unwrap().text, "Mira Solace");
    assert_eq!(
        short_answer("Who is the paternal grandfather of Edda Lorne?", &entities, &s).unwrap().text,
        "Oswin Tallow"
    );
    assert_eq!(
        short_answer("Who is the paternal grandmother of Edda Lorne?", &entities, &s).unwrap().text,
        "Berta Wend"
    );
    assert_eq!(short_answer("Who is Edda Lorne's mother-in-law?", &entities, &s).unwrap().text, "Grete Hollin");
}

#[test]
fn relations_are_read_from_their_own_cues_with_titles_and_shared_surnames() {
    // `performed by` names the performer though a bare `by` (the writer) comes first.
    let s = passage(&[
        "\"Tin Harbour\" is a song written by Oda Brenn, originally performed by Lasse Moor.",
        "Lasse Moor (2 May 1931 – 9 June 1990) was a singer born in Velden.",
    ]);
    let entities = ["Tin Harbour".to_owned()];
    let a = short_answer("Who is the performer of song Tin Harbour?", &entities, &s).unwrap();
    assert_eq!(a.text, "Lasse Moor");
    // `daughter of` inside `granddaughter of` names no parent.
    let s = passage(&[
        "Nell Aske is a director.",
        "She is a granddaughter of Ivo Aske, the daughter of Tor Aske and the niece of Rune Aske.",
    ]);
    let a = short_answer("Who is Nell Aske's father?", &["Nell Aske".to_owned()], &s).unwrap();
    assert_eq!(a.text, "Tor Aske");
    // A title after the name is part of it; parents that share a surname are given it.
    let s = sentences(&[
        "Rolf Tann was the son of Gerd III, Count of Halmbrook and Ida of Vell.",
        "Tess Tann was the daughter of Rolf and Maren Tann.",
    ]);
    let a = short_answer("Who is Rolf Tann's father?", &["Rolf Tann".to_owned()], &s).unwrap();
    assert_eq!(a.text, "Gerd III, Count of Halmbrook");
    let a = short_answer("Who is Rolf Tann's mother?", &["Rolf Tann".to_owned()], &s).unwrap();
    assert_eq!(a.text, "Ida of Vell");
    let a = short_answer("Who is Tess Tann's father?", &["Tess Tann".to_owned()], &s).unwrap();
    assert_eq!(a.text, "Rolf Tann");
}

#[test]
fn cues_name_the_relative_they_introduce_and_no_other() {
    let film = ["Grey Tide".to_owned()];
    // Two verbs share one `by`.
    let s = passage(&["Grey Tide is a 1992 film directed and produced by Ilse Varga."]);
    assert_eq!(short_answer("Who is the director of film Grey Tide?", &film, &s).unwrap().text, "Ilse Varga");
    // Another film that names this one after its cue does not say who directed this one;
    // the film's own sentence comes first.
    let s = sentences(&[
        "Salt Roads is a 1918 film directed by Oren Pike starring Grey Tide and Mira Solace.",
        "Grey Tide is a 1997 documentary film by Ilse Varga.",
    ]);
    assert_eq!(short_answer("Who is the director of film Grey Tide?", &film, &s).unwrap().text, "Ilse Varga");
    // A child; `father of X` names a child, not a father.
    let s = passage(&["Lasse Moor was a singer.", "He was the father of Pia Moor and brother of Olav Moor."]);
    let lasse = ["Lasse Moor".to_owned()];
    assert_eq!(short_answer("Who is the child of Lasse Moor?", &lasse, &s).unwrap().text, "Pia Moor");
    assert_eq!(Facts::new(&s).follow("Lasse Moor", Hop::Father), None);
    // A family cue names a relative only close after it.
    let s = passage(&[
        "Nell Aske was a poet.",
        "Her father died in 1925 when she was only five years old, and she and her sister Elisabeth Aske moved away.",
    ]);
    assert_eq!(Facts::new(&s).follow("Nell Aske", Hop::Father), None);
    // Another's wife is not the entity's; the entity's own possessive is.
    let s = passage(&[
        "Consort Wen was a consort of the court.",
        "Her son was raised by Emperor Hald's wife Empress Dora.",
        "Consort Wen's husband, Ivo Tallow, ruled the north.",
    ]);
    let wen = ["Consort Wen".to_owned()];
    assert_eq!(short_answer("Who is Consort Wen's husband?", &wen, &s).unwrap().text, "Ivo Tallow");
    // `son of A by his wife B`: B is the mother; an ordinal title belongs to the father's name;
    // a style before a name is no part of it.
    let s = sentences(&[
        "Edmund Tann, 2nd Duke of Vell, was the son of Gerd Tann, 1st Duke of Vell, by his wife Ida of Marsh.",
        "Pia Oren was one of the daughters of Pharaoh Akhet and his Great Royal Wife Nofret.",
    ]);
    let edmund = ["Edmund Tann, 2nd Duke of Vell".to_owned()];
    assert_eq!(short_answer("Who is Edmund Tann's mother?", &edmund, &s).unwrap().text, "Ida of Marsh");
    assert_eq!(short_answer("Who is Edmund Tann's father?", &edmund, &s).unwrap().text, "Gerd Tann, 1st Duke of Vell");
    let pia = ["Pia Oren".to_owned()];
    assert_eq!(short_answer("Who is Pia Oren's mother?", &pia, &s).unwrap().text, "Nofret");
    // `He married X, daughter of Y`: Y is X's parent, not his.
    let s = passage(&["Reginald II of Vell was a duke.", "He married Maud of Tarn, daughter of Otto, Duke of Tarn."]);
    assert_eq!(Facts::new(&s).follow("Reginald II of Vell", Hop::Father), None);
}

#[test]
fn a_chain_that_runs_out_of_evidence_names_what_to_retrieve_next() {
    let film = ["Grey Tide".to_owned()];
    let s = passage(&["Grey Tide is a 1992 film directed by Ilse Varga.", "It was shot in Port Aldra."]);
    // The director is reached but nothing about her gives a place: retrieve about her.
    let q = "Where was the director of film Grey Tide born?";
    assert_eq!(unanswered_bridge(q, &film, &s), Some("Ilse Varga".to_owned()));
    assert_eq!(second_query(q, "Ilse Varga"), "Ilse Varga where was the of film born");
    // A later hop the evidence does not state: retrieve about the last entity reached.
    assert_eq!(
        unanswered_bridge("Who is the father of the director of film Grey Tide?", &film, &s),
        Some("Ilse Varga".to_owned())
    );
    // Answered, or no hop found, or no chain: nothing to retrieve.
    let mut t = s.clone();
    t.push(Sentence { text: "Ilse Varga was born in Kelso Ford.", score: 1.0, group: 5 });
    assert_eq!(unanswered_bridge(q, &film, &t), None);
    assert_eq!(unanswered_bridge("Where was the director of film Salt Roads born?", &film, &s), None);
    assert_eq!(unanswered_bridge("Where was Ilse Varga born?", &film, &s), None);
}

#[test]
fn a_comparison_of_directors_names_each_undated_one_to_retrieve() {
    let q = "Which film has the director who was born first, Grey Tide or Salt Roads?";
    // A work's later sentence that opens with `It` goes on about it.
    let films = vec![
        Sentence { text: "Grey Tide is a 1992 film.", score: 3.0, group: 0 },
        Sentence { text: "It was directed by Ilse Varga.", score: 2.9, group: 0 },
        Sentence { text: "Salt Roads is a 1961 film directed by Oren Castel.", score: 2.0, group: 1 },
    ];
    assert_eq!(unanswered_bridges(q, &[], &films), vec!["Ilse Varga".to_owned(), "Oren Castel".to_owned()]);
    // One director dated (a life span whose dash the text lost), the other still asked about.
    let mut one = films.clone();
    one.push(Sentence { text: "Oren Castel (4 May 193112 June 1999) was a director.", score: 1.0, group: 2 });
    assert_eq!(unanswered_bridges(q, &[], &one), vec!["Ilse Varga".to_owned()]);
    // Both dated: the evidence decides, nothing to retrieve.
    let mut both = one.clone();
    both.push(Sentence { text: "Ilse Varga (born 2 March 1940) is a director.", score: 0.5, group: 3 });
    assert_eq!(unanswered_bridges(q, &[], &both), Vec::<String>::new());
    assert_eq!(short_answer(q, &[], &both).unwrap().text, "Salt Roads");
    // A comparison of the works themselves, or of people, asks for no second retrieval.
    assert!(!may_bridge("Which film came out first, Grey Tide or Salt Roads?"));
    assert!(may_bridge(q) && may_bridge("Where was the director of film Grey Tide born?"));
    // A relation question: the entity its chain reached, as before.
    let r = "Where was the director of film Grey Tide born?";
    assert_eq!(unanswered_bridges(r, &["Grey Tide".to_owned()], &films), vec!["Ilse Varga".to_owned()]);
}

#[test]
fn a_work_page_goes_on_about_the_work_and_a_director_is_no_company() {
    // `Directed by X, the film …` on the film's own page; a person's name ends before
    // `for` and the company it worked for.
    let s = passage(&[
        "Grey Tide, retitled Low Water in some releases, is a 1992 film.",
        "Directed by Ilse Varga, the film was written by Varga and Oren Castel.",
    ]);
    assert_eq!(Facts::new(&s).follow("Grey Tide", Hop::Role("director")).map(|f| f.0), Some("Ilse Varga".into()));
    let s = sentences(&["Salt Roads was a 1929 thriller directed by Oren Castel for Film Booking Offices of Aldra."]);
    assert_eq!(Facts::new(&s).follow("Salt Roads", Hop::Role("director")).map(|f| f.0), Some("Oren Castel".into()));
    // Not about a person the page's first sentence names.
    let s = passage(&["Grey Tide is a 1992 film by Ilse Varga.", "Directed by Oren Castel, Low Water followed."]);
    assert_eq!(Facts::new(&s).follow("Ilse Varga", Hop::Role("director")), None);
}

#[test]
fn a_life_span_whose_dash_was_lost_is_read_as_one() {
    assert_eq!(
        unglued("Eric Alm (13 December 153326 February 1577) was"),
        "Eric Alm (13 December 1533 – 26 February 1577) was"
    );
    assert_eq!(
        dated_events("Eric Alm (13 December 153326 February 1577) was a king."),
        vec![(Event::Birth, (1533, 12, 13)), (Event::Death, (1577, 2, 26))]
    );
    // Counts and well-formed text stay as they are.
    for text in ["A crowd of 12000 May Day marchers.", "Born 3 May 1931 – died 1 June 1990.", "Code 193145 March"] {
        assert!(matches!(unglued(text), std::borrow::Cow::Borrowed(_)), "{text}");
    }
}

#[test]
fn the_entity_reached_is_found_in_its_own_biography() {
    // Its biography names it by its surname; a regnal number and a short given name.
    let texts = [
        "Peter's Lane is a 1992 film directed by Ken Varga.",
        "Oren Pike was born in Port Aldra.",
        "Kenneth Ilse Varga (born 10 December 1960) is a film director.",
        "Varga was born in Kelso Ford, Manitoba.",
    ];
    let s: Vec<Sentence<'_>> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| Sentence { text: t, score: 10.0 - i as f32, group: [0, 1, 2, 2][i] })
        .collect();
    let a =
        short_answer("Where was the director of film Peter's Lane born?", &["Peter's Lane".to_owned()], &s).unwrap();
    assert_eq!(a.text, "Kelso Ford, Manitoba");
    assert!(names_key("reginald i of vell", "reginald i of vell"));
    assert!(!names_key("reginald ii of vell", "reginald i of vell"));
    assert!(names_key("kenneth lauren burns", "ken burns"));
    assert!(!names_key("gian carlo coppola", "gia coppola"));
    // A place keeps its state or province, unless it is the state's own name.
    let s = passage(&["Ada Holm was born in New York City, New York."]);
    let a = short_answer("Where was Ada Holm born?", &["Ada Holm".to_owned()], &s).unwrap();
    assert_eq!(a.text, "New York City");
    // A cause without what followed it or the `form of` before it.
    let s = passage(&["Jacques Moor suffered from a form of multiple sclerosis and died on 6 March 1925."]);
    let a = short_answer("What is the cause of death of Jacques Moor?", &["Jacques Moor".to_owned()], &s).unwrap();
    assert_eq!(a.text, "multiple sclerosis");
}
