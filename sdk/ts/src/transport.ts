// Transports to a pawld: the Connect protocol (the default) or gRPC, over
// HTTP/2 without TLS for http:// URLs, with an optional bearer token.

import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

/** TransportOptions chooses the protocol and credentials of a transport. */
export interface TransportOptions {
  /** "connect" (the default) or "grpc". */
  protocol?: "connect" | "grpc";
  /** The HTTP version of the Connect protocol: "2" (the default) or "1.1"; gRPC is always HTTP/2. */
  httpVersion?: "1.1" | "2";
  /** A bearer token (pawld --auth-file) sent as "Authorization: Bearer <token>" on every call. */
  token?: string;
  /** More interceptors, run after the credentials'. */
  interceptors?: Interceptor[];
}

/** bearer returns an interceptor that sends token as the call's bearer credential. */
export function bearer(token: string): Interceptor {
  if (token === "" || /[\s]/.test(token)) {
    throw new Error("pawl: a bearer token must be non-empty and contain no white space");
  }
  return (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
}

/**
 * createTransport returns a transport to the pawld at baseUrl
 * (http://host:port or https://host:port), with the binary Protobuf codec.
 */
export function createTransport(baseUrl: string, opts: TransportOptions = {}): Transport {
  const interceptors = [...(opts.token !== undefined ? [bearer(opts.token)] : []), ...(opts.interceptors ?? [])];
  if (opts.protocol === "grpc") {
    return createGrpcTransport({ baseUrl, interceptors });
  }
  if (opts.protocol !== undefined && opts.protocol !== "connect") {
    throw new Error(`pawl: protocol ${JSON.stringify(opts.protocol)} is neither "connect" nor "grpc"`);
  }
  return createConnectTransport({ baseUrl, httpVersion: opts.httpVersion ?? "2", useBinaryFormat: true, interceptors });
}
