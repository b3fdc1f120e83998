// Drives custody mcp with the TypeScript MCP SDK's client: it starts the
// server as a subprocess over stdio, lists its tools, makes the calls it is
// given, and prints what it saw as one JSON document. The SDK's client
// checks every structured answer against the tool's output schema, so a
// schema the server declares but does not keep fails here.
//
// usage: node script.mjs CUSTODY_BIN SUBMIT_SOCKET CALLS_JSON
//   CALLS_JSON: [{"name": "custody_run", "arguments": {...}}, ...]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, socket, callsJSON] = process.argv.slice(2);
if (!bin || !socket || !callsJSON) {
  console.error("usage: node script.mjs CUSTODY_BIN SUBMIT_SOCKET CALLS_JSON");
  process.exit(2);
}

const transport = new StdioClientTransport({ command: bin, args: ["--submit", socket, "mcp"], stderr: "inherit" });
const client = new Client({ name: "custody-node-test", version: "1.0.0" });
await client.connect(transport);

const out = { server: client.getServerVersion(), tools: [], calls: [] };
const { tools } = await client.listTools();
for (const t of tools) {
  out.tools.push({ name: t.name, description: t.description, inputSchema: t.inputSchema, hasOutputSchema: !!t.outputSchema });
}
for (const call of JSON.parse(callsJSON)) {
  try {
    const res = await client.callTool(call, undefined, { timeout: 120000 });
    out.calls.push({
      name: call.name,
      isError: !!res.isError,
      structured: res.structuredContent ?? null,
      text: (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
    });
  } catch (err) {
    out.calls.push({ name: call.name, protocolError: String(err) });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out));
