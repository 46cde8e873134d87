// Preloaded into the conformance suite's Node process (NODE_OPTIONS=--import): the suite's
// client takes a URL and nothing else, so this gives every request it makes (the MCP
// SDK's fetch and its own undici requests share undici's global dispatcher) the bearer
// token `warden serve --http` requires: `Authorization: Bearer $WARDEN_TOKEN`.
import { createRequire } from 'node:module';

const require = createRequire(`${process.env.WARDEN_NPM_MODULES}/`);
const { Agent, setGlobalDispatcher } = require('undici');

const authorization = `Bearer ${process.env.WARDEN_TOKEN}`;
const withToken = (headers) => {
  if (headers == null) return { authorization };
  if (Array.isArray(headers)) {
    return Array.isArray(headers[0])
      ? [...headers, ['authorization', authorization]]
      : [...headers, 'authorization', authorization];
  }
  if (typeof headers[Symbol.iterator] === 'function') {
    return [...headers, ['authorization', authorization]];
  }
  return { ...headers, authorization };
};

setGlobalDispatcher(
  new Agent().compose((dispatch) => (opts, handler) =>
    dispatch({ ...opts, headers: withToken(opts.headers) }, handler)),
);
