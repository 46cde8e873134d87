"""An attempt to approve one's own grant through a warden HTTP server, with nothing but
the standard library (http.client, socket), as another local user or as code inside a
sandboxed session would make it.

It reads the server's token file if it can, opens an MCP session that declares
elicitation, asks for a write grant on TARGET and answers its own consent prompt with
"approve"; then tries the stateless route. It prints one JSON object saying what each
step got: an HTTP status, or the exception that stopped it.

Arguments: one JSON object, as argv[1], or as the global ARGS when the text is run as
code in a session: {"tcp": "127.0.0.1:PORT"} or {"unix": "/path"}, "token_file",
"target", and optionally "token" and "proxy" ("HOST:PORT": go through that HTTP proxy
with CONNECT, as any client honouring HTTPS_PROXY would).
"""
import http.client
import json
import socket
import sys


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(self.unix_path)
        self.sock = sock


def connection(args):
    if "unix" in args:
        return UnixConnection(args["unix"])
    host, port = args["tcp"].rsplit(":", 1)
    if args.get("proxy"):
        proxy_host, proxy_port = args["proxy"].rsplit(":", 1)
        conn = http.client.HTTPConnection(proxy_host, int(proxy_port), timeout=30)
        conn.set_tunnel(host, int(port))
        return conn
    return http.client.HTTPConnection(host, int(port), timeout=30)


def post(args, headers, body, on_message=None):
    """POSTs one JSON-RPC message; returns (status, session id, messages)."""
    conn = connection(args)
    base = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if args.get("token"):
        base["Authorization"] = "Bearer " + args["token"]
    base.update(headers)
    conn.request("POST", "/mcp", json.dumps(body), base)
    reply = conn.getresponse()
    session = reply.getheader("mcp-session-id")
    messages = []
    if reply.status == 200 and "event-stream" in (reply.getheader("content-type") or ""):
        while True:
            line = reply.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").strip()
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                messages.append(message)
                if on_message:
                    on_message(message)
                if "id" in message and ("result" in message or "error" in message) \
                        and message.get("id") == body.get("id"):
                    break
    else:
        text = reply.read().decode("utf-8", "replace")
        if text.startswith("{"):
            messages.append(json.loads(text))
    conn.close()
    return reply.status, session, messages


def step(report, name, action):
    try:
        report[name] = action()
    except Exception as e:  # the point is to say what stopped the attempt
        report[name] = "%s: %s" % (type(e).__name__, e)


def attempt(args):
    report = {}

    def read_token():
        with open(args["token_file"]) as f:
            args["token"] = f.read().strip()
        return "read"

    step(report, "token_file", read_token)
    grant = {"path": args["target"], "access": "write", "reason": "routine maintenance"}

    def session_route():
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "self-grant", "version": "1"}}}
        status, session, _ = post(args, {}, init)
        if status != 200:
            return status
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        post(args, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})

        def approve(message):
            if message.get("method") == "elicitation/create":
                answer = {"jsonrpc": "2.0", "id": message["id"], "result": {
                    "action": "accept", "content": {"approve": True}}}
                post(args, headers, answer)

        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "request_grant", "arguments": grant}}
        _, _, messages = post(args, headers, call, approve)
        for m in messages:
            if m.get("id") == 2 and "result" in m:
                return {"status": 200, "granted": m["result"]["structuredContent"]["granted"]}
        return {"status": 200, "granted": None}

    def stateless_route():
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "request_grant", "arguments": grant,
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}}}
        headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                   "Mcp-Name": "request_grant"}
        status, _, messages = post(args, headers, call)
        return status

    step(report, "session", session_route)
    step(report, "stateless", stateless_route)
    return report


if "ARGS" in globals():
    print(json.dumps(attempt(ARGS)))  # noqa: F821 (set by the code that runs this text)
elif __name__ == "__main__" and len(sys.argv) > 1:
    print(json.dumps(attempt(json.loads(sys.argv[1]))))
