// A first chat on the runtime, every step over HTTP as the dev wallet: sign in with SIWE, store a key
// for the stand-in model in the vault, fund the wallet's ledger on the dev chain, then an agent and a
// session that says hello and calls a gateway tool, with what each message cost checked in the ledger.
//   node examples/first-chat.mjs [runtime URL, default http://127.0.0.1:8080]
import { account } from './dev-wallet.mjs';
import {
  call,
  deposit,
  refusal,
  request,
  runtimeUrl,
  serverSentEvents,
  signIn,
  storeProviderKey,
} from './runtime-client.mjs';

/** The gateway server whose `echo` tool the chat calls: the shipped catalog's `everything`. */
const server = process.env.SIGIL_SERVER ?? 'everything';
/** 4. One message, its events printed as they stream; resolves to them once `done` came. */
async function chat(agentId, sessionId, content) {
  console.log(`> ${content}`);
  const path = `/agents/${agentId}/sessions/${sessionId}/messages`;
  const response = await fetch(`${runtimeUrl}${path}`, request('POST', { content }));
  if (!response.ok) throw refusal('POST', path, response.status, await response.json());
  const events = [];
  let text = '';
  const flushText = () => {
    if (text !== '') console.log(`  answer    ${text.trim()}`);
    text = '';
  };
  for await (const { event, data } of serverSentEvents(response.body)) {
    events.push({ event, data });
    if (event === 'text-delta') {
      text += data.text;
      continue;
    }
    flushText();
    if (event === 'tool-call') console.log(`  tool-call ${data.name} ${JSON.stringify(data.input)}`);
    else if (event === 'tool-result') {
      const paid = data.paid ? `, paid ${data.paid.amount} on ${data.paid.network}` : '';
      console.log(
        `  result    ${data.name}: ${String(data.content).slice(0, 80)} (${data.billed ? 'billed' : 'not billed'}${paid})`,
      );
    } else if (event === 'usage')
      console.log(
        `  usage     step ${data.step}: ${data.inputTokens} in, ${data.outputTokens} out, base LLM cost ${data.baseLlmCost}`,
      );
    else if (event === 'cost')
      console.log(
        `  cost      charged ${data.charged} base units (base LLM cost ${data.baseLlmCost}, ${data.toolCalls} billed tool call(s) at ${data.toolCallPrice})`,
      );
    else if (event === 'done')
      console.log(`  done      ${data.finishReason}, ${data.steps} step(s), ${data.toolCalls} tool call(s)`);
    else if (event === 'error')
      throw new Error(
        `the chat ended with ${data.code}: ${data.message}${data.hint ? ` (${data.hint})` : ''}`,
      );
  }
  if (events.at(-1)?.event !== 'done') throw new Error(`the stream of "${content}" ended without done`);
  return events;
}

const dataOf = (events, name) => events.find((e) => e.event === name)?.data;

async function main() {
  console.log(`runtime   ${runtimeUrl}, as the dev wallet ${account.address}`);
  await signIn();
  await storeProviderKey();
  await deposit();
  const agent = await call('POST', '/agents', { name: 'first-chat', model: 'sigil-echo' });
  const session = await call('POST', `/agents/${agent.id}/sessions`, { servers: [server] });
  console.log(`agent     ${agent.id} (${agent.model}), session ${session.id} with the tools of ${server}`);

  const hello = await chat(agent.id, session.id, 'hello');
  const answer = hello
    .filter((e) => e.event === 'text-delta')
    .map((e) => e.data.text)
    .join('');
  if (answer.trim() === '') throw new Error('the hello message got no answer');

  const tool = `${server}__echo`;
  const used = await chat(agent.id, session.id, `use tool ${tool} with {"message":"hi"}`);
  const result = used.find((e) => e.event === 'tool-result' && e.data.name === tool)?.data;
  if (!result) throw new Error(`the model did not call ${tool}`);
  if (result.isError || !result.billed)
    throw new Error(
      `the tool call was not billed: ${result.isError ? 'it failed' : 'it was free'}: ${result.content}`,
    );
  console.log(
    `billed    ${tool} ran on the gateway and was billed ${dataOf(used, 'cost').toolCallPrice} base units`,
  );

  // Each message's charge, as its cost event said it, is the ledger's entry.
  const { transactions } = await call('GET', '/wallet/transactions?kind=charge&limit=200');
  for (const [message, events] of [
    ['hello', hello],
    ['tool', used],
  ]) {
    const cost = dataOf(events, 'cost');
    const entry = transactions.find((t) => t.id === cost.entryId);
    if (!entry || entry.amount !== cost.charged)
      throw new Error(
        `the ledger's charge of the ${message} message is ${entry?.amount ?? 'missing'}, its cost event said ${cost.charged}`,
      );
    console.log(
      `ledger    ${message} message: charge ${entry.id} of ${entry.amount} base units, as its cost event said`,
    );
  }
  await call('DELETE', `/agents/${agent.id}/sessions/${session.id}`);
}

try {
  await main();
} catch (error) {
  console.error(`first-chat failed: ${error.message}`);
  process.exit(1);
}
