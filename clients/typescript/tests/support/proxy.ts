/**
 * A TCP proxy in front of a server, that can slow down its answers ({@link TestProxy.delay})
 * or cut its clients off ({@link TestProxy.cut}): then nothing more is carried either way and
 * every connection is left hanging, as a network partition leaves it (no reset, no answer).
 */

import * as net from "node:net";

export class TestProxy {
  private readonly sockets = new Set<net.Socket>();
  private isCut = false;
  private delayMs = 0;

  private constructor(
    private readonly server: net.Server,
    /** `http://127.0.0.1:PORT` of the proxy. */
    readonly url: string,
  ) {}

  /** A proxy on a free loopback port to `target` (`http://HOST:PORT`). */
  static async start(target: string): Promise<TestProxy> {
    const { hostname, port } = new URL(target);
    let proxy: TestProxy | undefined;
    const server = net.createServer((client) => proxy?.carry(client, hostname, Number(port)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address() as net.AddressInfo;
    proxy = new TestProxy(server, `http://127.0.0.1:${address.port}`);
    return proxy;
  }

  /** From now on, what the server sends reaches the client `ms` later. */
  delay(ms: number): void {
    this.delayMs = ms;
  }

  /** From now on, nothing is carried: bytes sent either way stay where they are. */
  cut(): void {
    this.isCut = true;
    for (const socket of this.sockets) socket.pause();
  }

  /** Closes the proxy and every connection through it. */
  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private carry(client: net.Socket, host: string, port: number): void {
    const upstream = net.connect(port, host);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ]) {
      this.sockets.add(from);
      const send = (chunk: Buffer) => {
        if (!this.isCut) to.write(chunk);
      };
      from.on("data", (chunk: Buffer) => {
        // Every chunk waits as long, so they arrive in the order sent.
        if (from === upstream && this.delayMs > 0) setTimeout(send, this.delayMs, chunk);
        else send(chunk);
      });
      from.on("error", () => to.destroy());
      from.on("close", () => {
        this.sockets.delete(from);
        if (!this.isCut) to.destroy();
      });
    }
    if (this.isCut) this.cut();
  }
}
