//! Which of an agent's permission options a remote answer picks, by what the option means
//! (docs/decisions.md rule 41), not by its kind alone: codex-acp 2.6 offers two `reject_once`
//! options, one that lets the turn go on ("decline") and one that ends it ("cancel"), and
//! `allow_once` options that grant for the whole turn. An option that persists a rule is never
//! picked for a once answer; options that cannot be told apart are refused, naming why.
use agent_client_protocol_schema::v1::PermissionOptionKind as Kind;

/// One option of a `session/request_permission`, as offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermOption {
    pub id: String,
    pub kind: Kind,
    /// Its label for people.
    pub name: String,
}

/// What the person asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    AllowOnce,
    /// The agent's own `allow_always`, only where it is known to last the session alone.
    AllowForSession,
    RejectOnce,
    /// Reject, and the turn ends.
    RejectAndStop,
}

/// What an option means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    AllowOnce,
    /// Allows more than this one call: for the turn, the session or a rule.
    AllowLonger,
    RejectOnce,
    /// Rejects and ends the turn.
    RejectStop,
    /// Rejects and keeps a rule.
    RejectLonger,
}

/// Words in an `allow_once` option that make it last longer than the call.
const LONGER: &[&str] = &[
    "turn", "session", "always", "future", "again", "remember", "rule",
];
/// Words in a `reject_once` option that make it end the turn.
const STOPS: &[&str] = &["cancel", "stop", "abort", "interrupt", "end the turn"];

fn says(o: &PermOption, words: &[&str]) -> bool {
    let text = format!("{} {}", o.id, o.name).to_lowercase();
    words.iter().any(|w| text.contains(w))
}

/// Labels that say a plain reject and nothing more, whatever the option's id: Gemini CLI's
/// reject is id `cancel`, labelled "Reject".
const PLAIN_REJECT: &[&str] = &[
    "reject",
    "no",
    "deny",
    "decline",
    "reject once",
    "deny once",
];

fn plain_reject(o: &PermOption) -> bool {
    let name = o.name.trim().trim_end_matches(['.', '!']).to_lowercase();
    PLAIN_REJECT.contains(&name.as_str())
}

fn meaning(o: &PermOption) -> Meaning {
    match o.kind {
        Kind::AllowOnce if says(o, LONGER) => Meaning::AllowLonger,
        Kind::AllowOnce => Meaning::AllowOnce,
        Kind::RejectOnce if !plain_reject(o) && says(o, STOPS) => Meaning::RejectStop,
        Kind::RejectOnce => Meaning::RejectOnce,
        Kind::RejectAlways => Meaning::RejectLonger,
        _ => Meaning::AllowLonger,
    }
}

/// The options of one meaning.
fn of(options: &[PermOption], m: Meaning) -> Vec<&PermOption> {
    options.iter().filter(|o| meaning(o) == m).collect()
}

fn listed(os: &[&PermOption]) -> String {
    os.iter()
        .map(|o| format!("{:?} ({:?})", o.id, o.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one option of meaning `m`; None when there is none; Err naming them when several.
fn one<'a>(
    options: &'a [PermOption],
    m: Meaning,
    what: &str,
) -> Result<Option<&'a PermOption>, String> {
    match of(options, m).as_slice() {
        [] => Ok(None),
        [o] => Ok(Some(o)),
        many => Err(format!(
            "the agent offered {} options that {what}: {}, which sp-acp cannot tell apart; nothing ran, the prompt stays open",
            many.len(),
            listed(many)
        )),
    }
}

/// The option for `want`, and whether it ends the turn itself; Err says why none can be
/// picked (the answer is then acked `unsupported` and the prompt stays open).
pub fn choose(options: &[PermOption], want: Want) -> Result<(&PermOption, bool), String> {
    let none = |what: &str| {
        format!(
            "the agent offered no option that {what} (it offered {}); an option that keeps a rule is never chosen; nothing ran, the prompt stays open",
            listed(&options.iter().collect::<Vec<_>>())
        )
    };
    match want {
        Want::AllowOnce => one(options, Meaning::AllowOnce, "allow this call once")?
            .map(|o| (o, false))
            .ok_or_else(|| none("allows this call once")),
        Want::AllowForSession => match options
            .iter()
            .filter(|o| o.kind == Kind::AllowAlways)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [o] => Ok((*o, false)),
            [] => Err(none("allows for the session")),
            many => Err(format!(
                "the agent offered {} \"always\" options of different scope: {}, which sp-acp cannot tell apart; nothing ran, the prompt stays open",
                many.len(),
                listed(many)
            )),
        },
        Want::RejectOnce => match one(options, Meaning::RejectOnce, "reject this call and let the turn go on")? {
            Some(o) => Ok((o, false)),
            None if !of(options, Meaning::RejectStop).is_empty() => Err(format!(
                "the agent's only reject also ends the turn ({}); answer deny and stop for that; nothing ran, the prompt stays open",
                listed(&of(options, Meaning::RejectStop))
            )),
            None => Err(none("rejects this call once")),
        },
        Want::RejectAndStop => match one(options, Meaning::RejectStop, "reject this call and end the turn")? {
            Some(o) => Ok((o, true)),
            None => one(options, Meaning::RejectOnce, "reject this call")?
                .map(|o| (o, false))
                .ok_or_else(|| none("rejects this call")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options an agent offers, one `(id, kind, name)` row each.
    fn opts(rows: &[(&str, Kind, &str)]) -> Vec<PermOption> {
        rows.iter()
            .map(|&(id, kind, name)| PermOption {
                id: id.into(),
                kind,
                name: name.into(),
            })
            .collect()
    }

    /// As codex-acp 2.6.0 offers them for a command (its `commandDecisionOptions`).
    fn codex_command() -> Vec<PermOption> {
        opts(&[
            ("allow_once", Kind::AllowOnce, "Yes, proceed"),
            (
                "allow_for_session",
                Kind::AllowAlways,
                "Yes, and don't ask again for this command in this session",
            ),
            (
                "accept_execpolicy_amendment",
                Kind::AllowAlways,
                "Yes, and don't ask again for commands that start with `echo`",
            ),
            (
                "decline",
                Kind::RejectOnce,
                "No, continue without running it",
            ),
            (
                "cancel",
                Kind::RejectOnce,
                "No, and tell Codex what to do differently",
            ),
        ])
    }

    #[test]
    fn codex_acps_two_rejects_are_told_apart_by_meaning() {
        let o = codex_command();
        assert_eq!(choose(&o, Want::AllowOnce).unwrap().0.id, "allow_once");
        assert_eq!(choose(&o, Want::RejectOnce).unwrap(), (&o[3], false));
        assert_eq!(choose(&o, Want::RejectAndStop).unwrap(), (&o[4], true));
        // Two "always" options of different scope: neither is picked.
        let e = choose(&o, Want::AllowForSession).unwrap_err();
        assert!(
            e.contains("2 \"always\" options") && e.contains("allow_for_session"),
            "{e}"
        );
    }

    #[test]
    fn a_reject_that_only_ends_the_turn_is_not_a_plain_deny() {
        // codex-acp 2.6.0 for a file change: no "decline", only "cancel".
        let o = opts(&[
            ("allow_once", Kind::AllowOnce, "Yes, proceed"),
            (
                "allow_for_session",
                Kind::AllowAlways,
                "Yes, and don't ask again for these files",
            ),
            (
                "cancel",
                Kind::RejectOnce,
                "No, and tell Codex what to do differently",
            ),
        ]);
        let e = choose(&o, Want::RejectOnce).unwrap_err();
        assert!(
            e.contains("also ends the turn") && e.contains("\"cancel\""),
            "{e}"
        );
        assert_eq!(choose(&o, Want::RejectAndStop).unwrap(), (&o[2], true));
    }

    #[test]
    fn allow_once_options_that_last_the_turn_are_never_a_once_answer() {
        // codex-acp 2.6.0's permission profile: both `allow_once`, both for the whole turn.
        let o = opts(&[
            (
                "allow_permissions_turn",
                Kind::AllowOnce,
                "Yes, grant these permissions for this turn",
            ),
            (
                "allow_permissions_turn_strict_auto_review",
                Kind::AllowOnce,
                "Yes, grant for this turn with strict auto review",
            ),
            (
                "allow_permissions_session",
                Kind::AllowAlways,
                "Yes, grant these permissions for this session",
            ),
            (
                "reject_permissions",
                Kind::RejectOnce,
                "No, continue without permissions",
            ),
        ]);
        let e = choose(&o, Want::AllowOnce).unwrap_err();
        assert!(e.contains("no option that allows this call once"), "{e}");
        assert_eq!(
            choose(&o, Want::RejectOnce).unwrap().0.id,
            "reject_permissions"
        );
    }

    /// Gemini CLI 0.61's reject is id `cancel`, labelled "Reject": a plain reject.
    #[test]
    fn a_reject_labelled_plainly_is_a_reject_whatever_its_id() {
        let o = opts(&[
            ("proceed_once", Kind::AllowOnce, "Allow"),
            ("cancel", Kind::RejectOnce, "Reject"),
        ]);
        assert_eq!(choose(&o, Want::RejectOnce).unwrap(), (&o[1], false));
        assert_eq!(choose(&o, Want::RejectAndStop).unwrap(), (&o[1], false));
    }

    #[test]
    fn options_that_cannot_be_told_apart_are_refused_naming_them() {
        let o = opts(&[
            ("yes-a", Kind::AllowOnce, "Yes"),
            ("yes-b", Kind::AllowOnce, "Sure"),
            ("no", Kind::RejectOnce, "No"),
        ]);
        let e = choose(&o, Want::AllowOnce).unwrap_err();
        assert!(
            e.contains("cannot tell apart") && e.contains("yes-a") && e.contains("yes-b"),
            "{e}"
        );
        // claude-agent-acp 0.101.0: one of each, and a reject that keeps planning.
        let c = opts(&[
            ("allow-once", Kind::AllowOnce, "Yes"),
            (
                "allow-with-updates",
                Kind::AllowAlways,
                "Yes, and don't ask again for echo",
            ),
            ("reject", Kind::RejectOnce, "No, keep planning"),
        ]);
        assert_eq!(choose(&c, Want::AllowOnce).unwrap().0.id, "allow-once");
        assert_eq!(choose(&c, Want::RejectOnce).unwrap().0.id, "reject");
        // No stop option: deny and stop takes the plain reject (sp-acp then cancels the turn).
        assert_eq!(choose(&c, Want::RejectAndStop).unwrap(), (&c[2], false));
        assert!(choose(&c[..2], Want::RejectOnce).is_err());
    }
}
