// Preloaded into the conformance suite's Node process (NODE_OPTIONS=--import): every
// request it makes (the MCP SDK's fetch and its own undici requests share undici's
// global dispatcher) goes to `warden serve --http unix:$WARDEN_SOCKET`, whatever host and
// port its URL names; the server knows the client by its uid, no token needed.
import { createRequire } from 'node:module';

const require = createRequire(`${process.env.WARDEN_NPM_MODULES}/`);
const { Agent, setGlobalDispatcher } = require('undici');

setGlobalDispatcher(new Agent({ connect: { socketPath: process.env.WARDEN_SOCKET } }));
