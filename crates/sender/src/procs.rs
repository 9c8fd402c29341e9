//! Which process is which, from `/proc`: a pid plus its start time names one process for
//! good, so a pid the kernel reused for another program never counts as the one we saw.
//! Linux only; elsewhere nothing is known and every check answers "not alive".

/// A process's start time (clock ticks since boot, `/proc/PID/stat` field 22), or None
/// when there is no such process or it is a zombie (ended, not yet reaped).
pub fn start_time(pid: i64) -> Option<i64> {
    let (state, fields) = stat(pid)?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.get(18)?.parse().ok()
}

/// The parent pid of `pid` and `pid`'s command name.
pub fn parent(pid: i64) -> Option<(i64, String)> {
    let text = read_stat(pid)?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let _state = rest.next()?;
    Some((rest.next()?.parse().ok()?, comm))
}

/// Whether the process `pid` that started at `start` is still running (the same one).
pub fn alive(pid: i64, start: i64) -> bool {
    start_time(pid) == Some(start)
}

fn read_stat(pid: i64) -> Option<String> {
    if pid <= 0 || pid > i32::MAX as i64 {
        return None;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The state letter and the fields after it (field 3 on): the command name in parentheses
/// may hold spaces and parentheses, so the split starts after its last `)`.
fn stat(pid: i64) -> Option<(String, Vec<String>)> {
    let text = read_stat(pid)?;
    let close = text.rfind(')')?;
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.to_string();
    Some((state, rest.map(str::to_string).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id() as i64;
        let t = start_time(me).expect("our own start time");
        assert!(alive(me, t));
        assert!(!alive(me, t + 1));
        assert!(!alive(0, t));
        let (ppid, comm) = parent(me).expect("our parent");
        assert!(ppid > 0);
        assert!(!comm.is_empty());
    }

    #[test]
    fn a_reaped_child_is_not_alive() {
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = c.id() as i64;
        let t = start_time(pid).expect("the child runs");
        assert!(alive(pid, t));
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(!alive(pid, t));
    }
}
