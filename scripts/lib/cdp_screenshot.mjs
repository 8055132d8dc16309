// Screenshots one Zipkin trace page with a chosen span selected, through the Chrome DevTools
// Protocol of a headless Chromium that the caller started (scripts/trace-screenshot.sh):
//
//   node --experimental-websocket scripts/lib/cdp_screenshot.mjs DEBUG_PORT URL SPAN_NAME OUT.png
//
// `chromium --screenshot=FILE URL` alone photographs the page as it loads, with the root span's
// details open; this opens URL, waits until the span row named SPAN_NAME is drawn, clicks it (so
// the side panel shows that span's tags), and writes a PNG of the viewport. Node 20 needs
// --experimental-websocket for the global WebSocket (Node 22 has it by default). Loopback only.
import { writeFileSync } from "node:fs";

const [port, url, spanName, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: cdp_screenshot.mjs DEBUG_PORT URL SPAN_NAME OUT.png");
  process.exit(2);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function pageTarget() {
  for (let i = 0; i < 100; i++) {
    try {
      const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
      const page = list.find((t) => t.type === "page");
      if (page) return page.webSocketDebuggerUrl;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new Error(`no page target on DevTools port ${port}`);
}

const ws = new WebSocket(await pageTarget());
await new Promise((resolve, reject) => {
  ws.onopen = resolve;
  ws.onerror = () => reject(new Error("DevTools WebSocket failed"));
});
let nextId = 1;
const pending = new Map();
ws.onmessage = (event) => {
  const msg = JSON.parse(event.data);
  if (msg.id && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    msg.error ? reject(new Error(`${msg.error.message}`)) : resolve(msg.result);
  }
};
const send = (method, params = {}) =>
  new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params }));
  });
const evaluate = async (expression) =>
  (await send("Runtime.evaluate", { expression, returnByValue: true })).result.value;

await send("Page.enable");
await send("Runtime.enable");
// --window-size counts the (invisible) browser frame; this makes the viewport itself 1600x1000.
await send("Emulation.setDeviceMetricsOverride", { width: 1600, height: 1000, deviceScaleFactor: 1, mobile: false });
await send("Page.navigate", { url });

// Zipkin's span rows read "SERVICE: SPAN NAME" (Zipkin lower-cases span names); the innermost
// element whose text ends with ": SPAN_NAME" is the row's label. Clicking it selects the span.
const findAndClick = `(() => {
  const want = ${JSON.stringify(": " + spanName.toLowerCase())};
  const all = [...document.querySelectorAll("body *")].filter(
    (e) => e.children.length === 0 && (e.textContent || "").trim().toLowerCase().endsWith(want));
  if (all.length === 0) return "missing";
  all[0].scrollIntoView({ block: "center" });
  all[0].click();
  return "clicked";
})()`;
let state = "missing";
for (let i = 0; i < 150 && state !== "clicked"; i++) {
  await sleep(200);
  state = await evaluate(findAndClick);
}
if (state !== "clicked") {
  console.error(`cdp_screenshot: no span row named "${spanName}" at ${url}`);
  process.exit(1);
}
// Let the side panel render, then check it names the selected span.
let shown = false;
for (let i = 0; i < 50 && !shown; i++) {
  await sleep(200);
  shown = await evaluate(`document.body.innerText.toLowerCase().includes(${JSON.stringify(spanName.toLowerCase())})`);
}
await sleep(500);
const { data } = await send("Page.captureScreenshot", { format: "png" });
writeFileSync(out, Buffer.from(data, "base64"));
console.log(`${out}: ${spanName} selected`);
ws.close();
process.exit(0);
