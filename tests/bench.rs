//! `flowsieve bench`'s memory chase (`bench::chase_cycle`,
//! `bench::random_access_ns`): the buffer's lines form one cycle, so a lap
//! visits every line once, and successive chases carry on round it from
//! where the last one stopped (a chase that restarted at the same line
//! would time the same few lines again, whatever the buffer's size).

use flowsieve::bench::{chase_cycle, random_access_ns};

/// Words per 64-byte line.
const WORDS_PER_LINE: usize = 64 / std::mem::size_of::<usize>();

#[test]
fn a_lap_visits_every_line_once_and_chases_carry_on() {
    for bytes in [128usize, 4096, 1 << 20] {
        let cycle = chase_cycle(bytes);
        let lines = bytes / 64;
        assert_eq!(cycle.len(), lines * WORDS_PER_LINE);
        let mut seen = vec![false; lines];
        let mut at = 0;
        for _ in 0..lines {
            assert_eq!(
                at % WORDS_PER_LINE,
                0,
                "a step lands on a line's first word"
            );
            let line = at / WORDS_PER_LINE;
            assert!(
                !seen[line],
                "line {line} of {lines} visited twice in one lap"
            );
            seen[line] = true;
            let ns = random_access_ns(&cycle, &mut at, 1);
            assert!(ns.is_finite() && ns >= 0.0);
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(at, 0, "a lap ends where it began");
        // Three chases of a quarter lap end where one of three quarters does.
        let (mut split, mut whole) = (0, 0);
        for _ in 0..3 {
            random_access_ns(&cycle, &mut split, lines / 4);
        }
        random_access_ns(&cycle, &mut whole, 3 * (lines / 4));
        assert_eq!(split, whole);
    }
}
