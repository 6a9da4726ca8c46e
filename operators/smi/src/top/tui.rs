//! `top` live: the terminal in raw mode on the alternate screen (ratatui's crossterm
//! backend), a new sample every interval, keys read in between. The terminal is restored on
//! every way out: a return, an error, and a panic (ratatui's panic hook).
#![forbid(unsafe_code)]

use std::io;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::widgets::TableState;

use super::sample::{frame, take, Sample, Sort, SortKey, Users};
use super::view::draw;
use crate::access::Target;

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Quit,
    /// Sort the processes this way.
    Sort(Sort),
    /// Move the selection by this many rows (`isize::MIN`/`MAX`: to the first/last).
    Move(isize),
    /// Nothing.
    None,
}

/// Rows PgUp/PgDn move.
const PAGE: isize = 10;

/// What `k` does when the processes are sorted by `sort`.
pub(crate) fn action(k: KeyEvent, sort: Sort) -> Action {
    let by = |key: SortKey| {
        Action::Sort(Sort {
            key,
            reverse: false,
        })
    };
    match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('s' | '>') | KeyCode::Right => by(sort.key.step(1)),
        KeyCode::Char('<') | KeyCode::Left => by(sort.key.step(-1)),
        KeyCode::Char('m') => by(SortKey::Memory),
        KeyCode::Char('t') => by(SortKey::Tasks),
        KeyCode::Char('u') => by(SortKey::Util),
        KeyCode::Char('p') => by(SortKey::Pid),
        KeyCode::Char('r') => Action::Sort(Sort {
            reverse: !sort.reverse,
            ..sort
        }),
        KeyCode::Up | KeyCode::Char('k') => Action::Move(-1),
        KeyCode::Down | KeyCode::Char('j') => Action::Move(1),
        KeyCode::PageUp => Action::Move(-PAGE),
        KeyCode::PageDown => Action::Move(PAGE),
        KeyCode::Home => Action::Move(isize::MIN),
        KeyCode::End => Action::Move(isize::MAX),
        _ => Action::None,
    }
}

/// The selected row after moving `by` from `now` in a table of `len` rows (`None`: empty).
pub(crate) fn moved(now: Option<usize>, by: isize, len: usize) -> Option<usize> {
    let last = len.checked_sub(1)?;
    let from = now.unwrap_or(0).min(last) as isize;
    let to = match by {
        isize::MIN => 0,
        isize::MAX => last as isize,
        // The first move selects a row: the first.
        _ if now.is_none() => 0,
        _ => from.saturating_add(by).clamp(0, last as isize),
    };
    Some(to as usize)
}

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs the live screen on `targets` until a quit key: a sample every `interval`, the
/// processes sorted by `sort` (keys change it).
pub(crate) fn run(targets: &[Target], mut sort: Sort, interval: Duration) -> io::Result<()> {
    let _restore = Restore;
    let mut term = ratatui::try_init()?;
    let mut users = Users::default();
    let mut state = TableState::default();
    let mut prev: Option<Sample> = None;
    loop {
        // Samples start every `interval`, however long one takes.
        let next = Instant::now() + interval;
        let cur = take(targets);
        let mut f = frame(targets, prev.as_ref(), &cur, sort, &mut users);
        prev = Some(cur);
        loop {
            if state.selected().is_some() {
                state.select(moved(state.selected(), 0, f.procs.len()));
            }
            term.draw(|fr| draw(fr, &f, &mut state, true))?;
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => match action(k, sort) {
                    Action::Quit => return Ok(()),
                    Action::Sort(s) => {
                        sort = s;
                        f.resort(s);
                    }
                    Action::Move(by) => state.select(moved(state.selected(), by, f.procs.len())),
                    Action::None => {}
                },
                // A resize, a paste, focus: drawn again.
                _ => {}
            }
        }
    }
}
