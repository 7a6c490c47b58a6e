//! What the person at `hermes top` has chosen (selection, filter, open pane, a question being
//! asked) and how each key changes it. Pure: a key and the rows shown give a new state and at
//! most one [`KeyAction`] for the loop to carry out.

use hermes_ledger::DelegationId;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::services::overview::{Model, Row};

/// The pane under the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pane {
    None,
    /// The unit's status: its children, progress and delivery.
    Status(DelegationId),
    /// The unit's live transcript, followed.
    Log(DelegationId),
}

/// A line being typed or a question being asked, in the footer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    None,
    /// The filter being typed.
    Filter(String),
    /// "Stop this unit?"
    ConfirmStop(DelegationId),
}

/// What the loop must do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAction {
    None,
    Quit,
    /// Stop the unit (the person said yes).
    Stop(DelegationId),
}

/// The view's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ui {
    /// The selected unit (kept by id across refreshes).
    pub selected: Option<DelegationId>,
    /// Whether the last finished units are shown.
    pub show_finished: bool,
    /// Only units whose session, pool or machine contains this.
    pub filter: String,
    pub pane: Pane,
    pub prompt: Prompt,
    /// A one-line note in the footer (what the last action did).
    pub note: Option<String>,
}

impl Default for Ui {
    fn default() -> Ui {
        Ui {
            selected: None,
            show_finished: true,
            filter: String::new(),
            pane: Pane::None,
            prompt: Prompt::None,
            note: None,
        }
    }
}

impl Ui {
    /// The rows shown: running and queued, finished ones when toggled on, filtered.
    pub fn visible<'m>(&self, model: &'m Model) -> Vec<&'m Row> {
        model
            .rows
            .iter()
            .filter(|r| self.show_finished || !r.finished)
            .filter(|r| {
                self.filter.is_empty()
                    || r.session.contains(&self.filter)
                    || r.machine.contains(&self.filter)
                    || r.pool.as_deref().is_some_and(|p| p.contains(&self.filter))
            })
            .collect()
    }

    /// The index of the selected row among `rows` (the first row when none is selected, or
    /// when the selected one is gone).
    pub fn selected_row(&self, rows: &[&Row]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        Some(
            self.selected
                .as_ref()
                .and_then(|id| rows.iter().position(|r| &r.id == id))
                .unwrap_or(0),
        )
    }

    /// Moves the selection by `delta` rows.
    pub fn move_by(&mut self, delta: isize, rows: &[&Row]) {
        let Some(at) = self.selected_row(rows) else {
            self.selected = None;
            return;
        };
        let to = at.saturating_add_signed(delta).min(rows.len() - 1);
        self.selected = Some(rows[to].id.clone());
    }

    fn selected_id(&self, rows: &[&Row]) -> Option<DelegationId> {
        self.selected_row(rows).map(|i| rows[i].id.clone())
    }

    /// Handles one key.
    pub fn on_key(&mut self, key: KeyEvent, model: &Model) -> KeyAction {
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if ctrl_c {
            return KeyAction::Quit;
        }
        match std::mem::replace(&mut self.prompt, Prompt::None) {
            Prompt::Filter(mut text) => {
                match key.code {
                    KeyCode::Enter => self.filter = text,
                    KeyCode::Esc => {}
                    KeyCode::Backspace => {
                        text.pop();
                        self.prompt = Prompt::Filter(text);
                    }
                    KeyCode::Char(c) if text.chars().count() < 128 => {
                        text.push(c);
                        self.prompt = Prompt::Filter(text);
                    }
                    _ => self.prompt = Prompt::Filter(text),
                }
                return KeyAction::None;
            }
            Prompt::ConfirmStop(id) => {
                return match key.code {
                    KeyCode::Char('y' | 'Y') => KeyAction::Stop(id),
                    _ => {
                        self.note = Some(format!("{id}: not stopped"));
                        KeyAction::None
                    }
                };
            }
            Prompt::None => {}
        }
        let rows = self.visible(model);
        match key.code {
            KeyCode::Char('q') => return KeyAction::Quit,
            KeyCode::Esc if self.pane != Pane::None => self.pane = Pane::None,
            KeyCode::Esc => return KeyAction::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1, &rows),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1, &rows),
            KeyCode::PageUp => self.move_by(-10, &rows),
            KeyCode::PageDown => self.move_by(10, &rows),
            KeyCode::Home => self.move_by(isize::MIN / 2, &rows),
            KeyCode::End => self.move_by(isize::MAX / 2, &rows),
            KeyCode::Enter => {
                if let Some(id) = self.selected_id(&rows) {
                    self.pane = match &self.pane {
                        Pane::Status(open) if *open == id => Pane::None,
                        _ => Pane::Status(id),
                    };
                }
            }
            KeyCode::Char('l') => {
                if let Some(id) = self.selected_id(&rows) {
                    self.pane = match &self.pane {
                        Pane::Log(open) if *open == id => Pane::None,
                        _ => Pane::Log(id),
                    };
                }
            }
            KeyCode::Char('s') => match self.selected_row(&rows).map(|i| rows[i]) {
                Some(row) if !row.finished => self.prompt = Prompt::ConfirmStop(row.id.clone()),
                Some(row) => self.note = Some(format!("{}: already {}", row.id, row.status)),
                None => {}
            },
            KeyCode::Char('f') => self.prompt = Prompt::Filter(self.filter.clone()),
            KeyCode::Char('t') => self.show_finished = !self.show_finished,
            _ => {}
        }
        KeyAction::None
    }
}
