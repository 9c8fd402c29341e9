//! The header sets a page action is tried with, for the suites that check its CSRF rules.
#![allow(dead_code)]

/// Header sets with the login `cookie` that a page action must refuse (403): no CSRF header, a
/// wrong one, and the right one from another origin or from a cross-site fetch.
pub fn refused<'a>(cookie: &'a str, csrf: &'a str) -> Vec<Vec<(&'a str, &'a str)>> {
    vec![
        vec![("cookie", cookie)],
        vec![("cookie", cookie), ("x-sessionpipe-csrf", "0000")],
        vec![
            ("cookie", cookie),
            ("x-sessionpipe-csrf", csrf),
            ("origin", "http://evil.example"),
        ],
        vec![
            ("cookie", cookie),
            ("x-sessionpipe-csrf", csrf),
            ("sec-fetch-site", "cross-site"),
        ],
    ]
}

/// The login `cookie` with its CSRF header: what a page action takes.
pub fn taken<'a>(cookie: &'a str, csrf: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("cookie", cookie), ("x-sessionpipe-csrf", csrf)]
}
