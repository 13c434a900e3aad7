// Run by tests/clients/test_agents_js.py with node: the JavaScript OpenAI Agents SDK
// (@openai/agents from npm) against Gaia, configured only by the environment (the README's
// agents-js variables) plus GAIA_MODEL; NODE_PATH points at the installed packages.
// `node agents_sdk.cjs plain|stream|tool [responses|chat]` prints one JSON line.
const { Agent, run, setOpenAIAPI, tool } = require("@openai/agents");
const { z } = require("zod");

const calls = [];
const getWeather = tool({
  name: "get_weather",
  description: "The weather in a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return `sunny in ${city}`;
  },
});

async function main(mode, api, prompt) {
  if (api === "chat") setOpenAIAPI("chat_completions");
  const agent = new Agent({
    name: "probe", instructions: "Be brief.", model: process.env.GAIA_MODEL,
    tools: mode === "tool" ? [getWeather] : [],
    // GAIA_TOOL_CHOICE=required: the first request must call a tool (the SDK resets it to
    // auto once the tool has run, so the model then answers)
    modelSettings: process.env.GAIA_TOOL_CHOICE ? { toolChoice: process.env.GAIA_TOOL_CHOICE }
      : {},
  });
  const input = prompt || (mode === "tool" ? "What is the weather in Paris?" : "Say hello");
  const result = await run(agent, input, { stream: mode === "stream" });
  const deltas = [];
  if (mode === "stream") {
    for await (const event of result) {
      if (event.type === "raw_model_stream_event" && event.data.type === "output_text_delta") {
        deltas.push(event.data.delta);
      }
    }
    await result.completed;
  }
  const items = result.newItems.map((item) => item.type);
  console.log(JSON.stringify({ final: result.finalOutput, calls, deltas, items }));
}

main(process.argv[2], process.argv[3] || "responses", process.argv[4]).catch((error) => {
  console.error(error);
  process.exit(1);
});
