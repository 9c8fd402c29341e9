#!/usr/bin/env python3
"""A scripted stand-in for the model servers the real agent CLIs call, on 127.0.0.1.

Speaks just enough of:
  - the Anthropic Messages API: POST /v1/messages (JSON, or server-sent events when
    "stream" is true) and POST /v1/messages/count_tokens   (Claude Code)
  - the OpenAI Responses API: POST /v1/responses (server-sent events)   (Codex)
  - OpenAI Chat Completions: POST /v1/chat/completions (SSE or JSON)    (OpenCode's
    openai-compatible provider)
  - the Gemini API: POST /v1beta/models/<model>:generateContent (JSON),
    :streamGenerateContent (server-sent events) and :countTokens   (Gemini CLI, pointed here
    by GOOGLE_GEMINI_BASE_URL)
  - GET /v1/models (a one-model list), anything else: 404 JSON.

Every request is appended to the log (--log, one JSON object a line: method, path, headers,
body, and what the stand-in answered), so a test can prove what the model saw.

What it answers (its "script"), read from the conversation's last input only (everything after
the model's last output):
  1. The last input is a tool result: a final text "SP-FINAL: tool result seen." (the test
     reads the tool result in the log).
  2. The last user or system text contains "SP-ECHO:<WORD>": the text "SP-SAW:<WORD>", so a
     test can prove a delivered prompt reached the model.
  3. It contains "SP-SLOW" and the request offers tools (the agent's own turn, not a title):
     text that trickles out, one chunk a second, for --slow-s seconds (a turn slow enough to
     cancel), or <n> seconds for "SP-SLOW:<n>". The log says when the client closed such a
     stream early.
  4. It contains "SP-RUN:<command>" (to the end of the line) and the request offers a shell
     tool: a call of that tool running <command>. With "SP-ESCALATE" too, a Codex call asks
     to run outside the sandbox (sandbox_permissions "require_escalated").
  5. The conversation's first text contains "SP-STEPS:<n> SP-GATE:<dir>" and the request
     offers a shell tool: a turn of <n> slow tool calls. Call k (k = tool results so far + 1)
     runs `echo step-k >> steps.txt` and prints SP-HOLD:<dir>/go-k, so after each call the stand-in
     holds its next answer until the test creates <dir>/go-k (the test puts a steer, an
     interrupt or a cancel in between). After <n> results: "SP-FINAL: tool result seen.".
  5b. Issue 27 (Claude Code only): the conversation's first text holds
     - "SP-CALLS:<n>" beside "SP-RUN:<command>": the same call <n> times, one a request,
       while fewer than <n> tool results came back;
     - "SP-PAIR:<first> SP-AND:<second>": one answer with two shell calls, <first> then
       <second> (each to the end of its marker);
     - "SP-ASK:<question>|<label>|<label>…": a call of AskUserQuestion asking that;
     - "SP-PLAN:<text>": in plan mode, a Write of that text to the plan file Claude Code
       named, then a call of ExitPlanMode (2.1.332 reads the plan from that file).
  5c. Issue 27 (Codex): "SP-QUESTION:<question>|<label>|<label>…" and the request offers
     request_user_input (the feature default_mode_request_user_input): a call of it asking
     that (question id "pick"), once.
  6. Anything else (titles, summaries, side requests): the text "SP-OK".
Before any of these, "SP-HOLD:<path>" in that text holds the answer back until <path> exists
(--hold-s at most), so a test can prepare something while the agent waits on its model.
Codex's automatic approval review (Guardian) is answered with a text that is no assessment.

On start it prints "PORT <n>" on stdout (bind port 0 for any free port).
"""
import argparse
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_LOCK = threading.Lock()
ARGS = None
SEQ = [0]


def next_seq():
    with LOG_LOCK:
        SEQ[0] += 1
        return SEQ[0]


def log(entry):
    entry["t"] = time.time()
    with LOG_LOCK:
        with open(ARGS.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


# ---------------------------------------------------------------------------------------
# Reading the conversation


def texts_of(content):
    """Every text in an Anthropic/OpenAI content value (string or list of parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                for k in ("text", "content", "output"):
                    if k in p:
                        out.extend(texts_of(p[k]))
    elif isinstance(content, dict):
        for k in ("text", "content", "output"):
            if k in content:
                out.extend(texts_of(content[k]))
    return out


def strings_of(v):
    """Every string inside a JSON value, in order."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for x in v.values() for s in strings_of(x)]
    if isinstance(v, list):
        return [s for x in v for s in strings_of(x)]
    return []


def conversation(api, body):
    """The conversation as (role, type, content) triples; a tool result's role is "tool"."""
    if api == "responses":
        items = body.get("input") or []
        if isinstance(items, str):
            return [("user", "message", items)]
        msgs = []
        for it in items:
            if not isinstance(it, dict):
                continue
            t = it.get("type", "message")
            if t == "message":
                msgs.append((it.get("role"), t, it.get("content")))
            elif t.endswith("_call_output"):
                msgs.append(("tool", t, it.get("output")))
            elif t.endswith("_call") or t == "reasoning":
                msgs.append(("assistant", t, None))
    elif api == "gemini":
        msgs = []
        for c in body.get("contents") or []:
            parts = c.get("parts") or []
            if c.get("role") == "model":
                role = "assistant"
            elif any(isinstance(p, dict) and "functionResponse" in p for p in parts):
                role = "tool"
            else:
                role = "user"
            content = []
            for p in parts:
                if isinstance(p, dict) and "functionResponse" in p:
                    # Its strings as they are (a JSON dump would escape the output's newlines
                    # into the SP-HOLD path).
                    content.append({"text": "\n".join(strings_of(p["functionResponse"]))})
                elif isinstance(p, dict):
                    content.append(p)
            msgs.append((role, None, content))
    else:  # anthropic and chat completions: role/content messages
        msgs = []
        for m in body.get("messages") or []:
            role, content = m.get("role"), m.get("content")
            if role == "user" and isinstance(content, list) and any(
                    isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
                role = "tool"
            msgs.append((role, None, content))
    return msgs


def steps_of(api, body):
    """(n, gate dir, tool results so far) of an SP-STEPS turn, or None."""
    msgs = conversation(api, body)
    first = "\n".join(t for r, _, c in msgs if r in ("user", "system", "developer") for t in texts_of(c))
    m = re.search(r"SP-STEPS:(\d+) SP-GATE:(\S+)", first)
    if not m:
        return None
    done = 0
    for role, _, content in msgs:
        if role != "tool":
            continue
        if api == "anthropic" and isinstance(content, list):
            done += sum(1 for p in content if isinstance(p, dict) and p.get("type") == "tool_result")
        else:
            done += 1
    return int(m.group(1)), m.group(2), done


def last_turn(api, body):
    """(kind, text) of the conversation's last input: every message after the model's last
    output. kind is "tool_result" when that input holds a tool result, else "text"."""
    msgs = conversation(api, body)
    tail = []
    for role, _, content in reversed(msgs):
        if role == "assistant":
            break
        tail.append((role, content))
    tail.reverse()
    kind = "tool_result" if any(r == "tool" for r, _ in tail) else "text"
    return (kind, "\n".join(t for _, c in tail for t in texts_of(c)))


def shell_tool(api, body):
    """The name and kind of the shell tool the request offers, or None."""
    tools = body.get("tools") or []
    if api == "gemini":
        tools = [f for t in tools if isinstance(t, dict) for f in (t.get("functionDeclarations") or [])]
    names = []
    for t in tools:
        if not isinstance(t, dict):
            continue
        name = t.get("name") or (t.get("function") or {}).get("name")
        names.append((name, t))
    for want in ("Bash", "bash", "Execute", "shell", "exec_command", "shell_command", "run_shell_command"):
        for name, t in names:
            if name == want:
                return name, t
    return None


GUARDIAN_MARKS = ("request action you are assessing", "since your last approval assessment")


def is_guardian(api, body):
    """Codex's automatic approval review (Guardian) asks the model too; it never gets a tool."""
    if api != "responses":
        return False
    whole = json.dumps(body.get("input"))
    return any(m in whole for m in GUARDIAN_MARKS)


def hold(text):
    """SP-HOLD:<path>: keep the answer back until that file exists (at most --hold-s)."""
    m = re.search(r"SP-HOLD:(\S+)", text)
    if not m:
        return
    end = time.time() + ARGS.hold_s
    import os
    if not os.path.exists(m.group(1)):
        # The agent's hooks before this request have all run: a test may act now.
        log({"note": "holding", "path": m.group(1)})
    while not os.path.exists(m.group(1)) and time.time() < end:
        time.sleep(0.05)


def decide(api, body):
    """What to answer: ("text", str, slow) or ("tool", name, arguments_dict)."""
    if is_guardian(api, body):
        return ("text", "SP-GUARDIAN: no assessment from the stand-in.", False)
    kind, text = last_turn(api, body)
    hold(text)
    steps = steps_of(api, body) if shell_tool(api, body) else None
    if steps and steps[2] < steps[0]:
        n, gate, done = steps
        k = done + 1
        # The hold is spelled by printf, so only the call's output holds it, not an agent's
        # echo of the command (Codex quotes a blocked command back to the model).
        return tool_call(api, body, "echo step-%d >> steps.txt; printf 'SP-%%s:%%s\\n' HOLD %s/go-%d" % (k, gate, k), "")
    many = calls_of(api, body) if shell_tool(api, body) else None
    if many:
        return many
    ask = codex_question(api, body)
    if ask:
        return ask
    if kind == "tool_result":
        return ("text", "SP-FINAL: tool result seen.", False)
    m = re.search(r"SP-ECHO:([A-Za-z0-9_-]+)", text)
    if m:
        return ("text", "SP-SAW:" + m.group(1), False)
    if "SP-SLOW" in text and body.get("tools"):
        # "SP-SLOW:<n>": for n seconds instead of --slow-s (a reply that grows, then ends).
        m = re.search(r"SP-SLOW:([0-9]+)", text)
        return ("text", "SP-SLOW reply. ", float(m.group(1)) if m else True)
    m = re.search(r"SP-RUN:(.*)", text)
    if m and shell_tool(api, body):
        return tool_call(api, body, m.group(1).strip(), text)
    return ("text", "SP-OK", False)


def first_text(api, body):
    return "\n".join(t for r, _, c in conversation(api, body) if r in ("user", "system") for t in texts_of(c))


def results_so_far(api, body):
    return sum(1 for role, _, content in conversation(api, body) if role == "tool"
               for p in (content if isinstance(content, list) else [])
               if isinstance(p, dict) and p.get("type") == "tool_result")


def calls_of(api, body):
    """Issue 27's scripts (5b), Anthropic only: the answer, or None."""
    if api != "anthropic":
        return None
    first = first_text(api, body)
    done = results_so_far(api, body)
    name, _ = shell_tool(api, body)
    m = re.search(r"SP-CALLS:(\d+)", first)
    run = re.search(r"SP-RUN:(.*)", first)
    if m and run:
        if done < int(m.group(1)):
            return ("tool", name, {"command": run.group(1).strip(), "description": "Write the marker file"})
        return None
    m = re.search(r"SP-PAIR:(.*?) SP-AND:(.*)", first)
    if m:
        if done == 0:
            return ("tools", [(name, {"command": m.group(1).strip(), "description": "First step"}),
                              (name, {"command": m.group(2).strip(), "description": "Second step"})])
        return None
    m = re.search(r"SP-PLAN:(.*)", first)
    if m:
        where = re.search(r"create your plan at (\S+\.md)", json.dumps(body))
        if done == 0 and where:
            return ("tool", "Write", {"file_path": where.group(1), "content": m.group(1).strip() + "\n"})
        if done <= 1:
            return ("tool", "ExitPlanMode", {})
        return None
    m = re.search(r"SP-ASK:(.*)", first)
    if m and done == 0:
        q, *labels = [x.strip() for x in m.group(1).split("|")]
        return ("tool", "AskUserQuestion", {"questions": [{
            "question": q, "header": "Pick", "multiSelect": False,
            "options": [{"label": l, "description": "The " + l + " one"} for l in labels]}]})
    return None


def codex_question(api, body):
    """Issue 27's Codex question (5c): a call of request_user_input, or None."""
    if api != "responses" or kind_of_last(api, body) == "tool_result":
        return None
    offered = any(isinstance(t, dict) and t.get("name") == "request_user_input" for t in body.get("tools") or [])
    m = re.search(r"SP-QUESTION:(.*)", first_text(api, body))
    if not (offered and m):
        return None
    q, *labels = [x.strip() for x in m.group(1).split("|")]
    return ("tool", "request_user_input", {"questions": [{
        "id": "pick", "header": "Pick", "question": q,
        "options": [{"label": l, "description": "The " + l + " one"} for l in labels]}]})


def kind_of_last(api, body):
    return last_turn(api, body)[0]


def tool_call(api, body, cmd, text):
    """A call of the request's shell tool running cmd."""
    name, _ = shell_tool(api, body)
    if name == "Execute":
        # Droid's shell tool wants the model's own risk rating; SP-RISK:<level> chooses it
        # (Droid's exec gate lets a `high` call run only when a hook allows it).
        m = re.search(r"SP-RISK:(low|medium|high)", text)
        return ("tool", name, {"command": cmd, "riskLevelReason": "The test asked for this command.",
                               "riskLevel": m.group(1) if m else "low"})
    if name in ("Bash", "bash", "run_shell_command"):
        return ("tool", name, {"command": cmd, "description": "Write the marker file"})
    if name == "exec_command":
        args = {"cmd": cmd}
    elif name == "shell_command":
        args = {"command": cmd}
    else:  # "shell": argv form
        args = {"command": ["bash", "-lc", cmd]}
    if "SP-ESCALATE" in text:
        args["sandbox_permissions"] = "require_escalated"
        args["justification"] = "The test needs this command to run outside the sandbox."
    return ("tool", name, args)


# ---------------------------------------------------------------------------------------
# Answer shapes


def sse(event, data):
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode()


def anthropic_stream(body, answer):
    mid = "msg_" + uuid.uuid4().hex[:24]
    model = body.get("model", "claude-standin")
    usage = {"input_tokens": 10, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    yield sse("message_start", {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})
    if answer[0] in ("tool", "tools"):
        calls = answer[1] if answer[0] == "tools" else [(answer[1], answer[2])]
        for i, (name, args) in enumerate(calls):
            tid = "toolu_" + uuid.uuid4().hex[:24]
            yield sse("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}}})
            yield sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}})
            yield sse("content_block_stop", {"type": "content_block_stop", "index": i})
        stop = "tool_use"
    else:
        _, text, slow = answer
        yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}})
        for chunk in text_chunks(text, slow):
            yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": chunk}})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        stop = "end_turn"
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": 5}})
    yield sse("message_stop", {"type": "message_stop"})


def anthropic_json(body, answer):
    mid = "msg_" + uuid.uuid4().hex[:24]
    if answer[0] in ("tool", "tools"):
        calls = answer[1] if answer[0] == "tools" else [(answer[1], answer[2])]
        content = [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": n, "input": a}
                   for n, a in calls]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": answer[1]}]
        stop = "end_turn"
    return {"id": mid, "type": "message", "role": "assistant", "model": body.get("model", "claude-standin"),
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}}


def text_chunks(text, slow):
    if not slow:
        yield text
        return
    end = time.time() + (ARGS.slow_s if slow is True else slow)
    yield text
    while time.time() < end:
        time.sleep(1)
        yield "."


def responses_stream(body, answer):
    rid = "resp_" + uuid.uuid4().hex[:24]
    model = body.get("model", "gpt-standin")
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "in_progress", "output": []}
    yield sse("response.created", {"type": "response.created", "response": base})
    if answer[0] == "tool":
        _, name, args = answer
        item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24], "status": "completed",
                "call_id": "call_" + uuid.uuid4().hex[:24], "name": name, "arguments": json.dumps(args)}
        yield sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item})
        yield sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
        out = [item]
    else:
        _, text, slow = answer
        iid = "msg_" + uuid.uuid4().hex[:24]
        yield sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "message", "id": iid, "role": "assistant", "status": "in_progress", "content": []}})
        full = ""
        for chunk in text_chunks(text, slow):
            full += chunk
            yield sse("response.output_text.delta", {"type": "response.output_text.delta", "item_id": iid,
                                                     "output_index": 0, "content_index": 0, "delta": chunk})
        item = {"type": "message", "id": iid, "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": full, "annotations": []}]}
        yield sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
        out = [item]
    done = dict(base, status="completed", output=out,
                usage={"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                       "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15})
    yield sse("response.completed", {"type": "response.completed", "response": done})


def chat_chunk(cid, model, delta, finish=None):
    return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def chat_stream(body, answer):
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    model = body.get("model", "standin")

    def data(obj):
        return ("data: %s\n\n" % json.dumps(obj)).encode()

    if answer[0] == "tool":
        _, name, args = answer
        yield data(chat_chunk(cid, model, {"role": "assistant", "content": None, "tool_calls": [{
            "index": 0, "id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}))
        yield data(chat_chunk(cid, model, {}, "tool_calls"))
    else:
        _, text, slow = answer
        yield data(chat_chunk(cid, model, {"role": "assistant", "content": ""}))
        for chunk in text_chunks(text, slow):
            yield data(chat_chunk(cid, model, {"content": chunk}))
        yield data(chat_chunk(cid, model, {}, "stop"))
    usage = chat_chunk(cid, model, {})
    usage["choices"] = []
    usage["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield data(usage)
    yield b"data: [DONE]\n\n"


def chat_json(body, answer):
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    if answer[0] == "tool":
        msg = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": answer[1], "arguments": json.dumps(answer[2])}}]}
        finish = "tool_calls"
    else:
        msg = {"role": "assistant", "content": answer[1]}
        finish = "stop"
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": body.get("model", "standin"),
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def gemini_response(answer):
    if answer[0] == "tool":
        parts = [{"functionCall": {"name": answer[1], "args": answer[2]}}]
    else:
        parts = [{"text": answer[1]}]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": "standin"}


def gemini_stream(answer):
    if answer[0] == "tool":
        yield ("data: %s\r\n\r\n" % json.dumps(gemini_response(answer))).encode()
        return
    _, text, slow = answer
    chunks = list(text_chunks(text, slow)) if not slow else text_chunks(text, slow)
    last = None
    for chunk in chunks:
        if last is not None:
            r = gemini_response(("text", last, False))
            del r["candidates"][0]["finishReason"]
            yield ("data: %s\r\n\r\n" % json.dumps(r)).encode()
        last = chunk
    yield ("data: %s\r\n\r\n" % json.dumps(gemini_response(("text", last or "", False)))).encode()


# ---------------------------------------------------------------------------------------
# HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def read_body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        if self.headers.get("content-encoding", "").lower() in ("gzip",):
            import gzip
            raw = gzip.decompress(raw)
        elif self.headers.get("content-encoding", "").lower() == "zstd":
            return raw, None
        try:
            return raw, json.loads(raw) if raw else None
        except ValueError:
            return raw, None

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, gen, n=None):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in gen:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log({"note": "client closed the stream", "n": n, "path": self.path})
            return
        log({"note": "stream sent", "n": n, "path": self.path})

    def do_GET(self):
        path = self.path.split("?")[0]
        log({"method": "GET", "path": self.path, "headers": dict(self.headers)})
        if path.endswith("/models"):
            return self.send_json(200, {"object": "list", "data": [
                {"id": "standin", "object": "model", "created": 0, "owned_by": "sessionpipe"}]})
        self.send_json(404, {"error": {"type": "not_found", "message": "stand-in: no " + path}})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        path = self.path.split("?")[0]
        raw, body = self.read_body()
        n = next_seq()
        entry = {"n": n, "method": "POST", "path": self.path, "headers": dict(self.headers),
                 "body": body if body is not None else raw.decode("utf-8", "replace")}
        if body is None:
            log(entry)
            return self.send_json(400, {"error": {"message": "stand-in: body is not JSON"}})
        if path.endswith("/messages/count_tokens"):
            log(entry)
            return self.send_json(200, {"input_tokens": 10})
        def answered(api):
            entry["answer"] = decide(api, body)
            log(entry)
            return entry["answer"]

        if path.endswith("/messages"):
            answer = answered("anthropic")
            if body.get("stream"):
                return self.send_events(anthropic_stream(body, answer), n)
            return self.send_json(200, anthropic_json(body, answer))
        if path.endswith("/responses"):
            answer = answered("responses")
            return self.send_events(responses_stream(body, answer), n)
        if path.endswith(":countTokens"):
            log(entry)
            return self.send_json(200, {"totalTokens": 10})
        if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
            answer = answered("gemini")
            if path.endswith(":streamGenerateContent"):
                return self.send_events(gemini_stream(answer), n)
            return self.send_json(200, gemini_response(answer))
        if path.endswith("/chat/completions"):
            answer = answered("chat")
            if body.get("stream"):
                return self.send_events(chat_stream(body, answer), n)
            return self.send_json(200, chat_json(body, answer))
        log(entry)
        self.send_json(404, {"error": {"type": "not_found", "message": "stand-in: no " + path}})


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True)
    p.add_argument("--slow-s", type=float, default=60.0)
    p.add_argument("--hold-s", type=float, default=120.0)
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
