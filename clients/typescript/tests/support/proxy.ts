/**
 * A TCP proxy in front of a server that can cut its clients off: after {@link CutProxy.cut},
 * nothing more is carried either way and every connection is left hanging, as a network
 * partition leaves it (no reset, no answer).
 */

import * as net from "node:net";

export class CutProxy {
  private readonly sockets = new Set<net.Socket>();
  private isCut = false;

  private constructor(
    private readonly server: net.Server,
    /** `http://127.0.0.1:PORT` of the proxy. */
    readonly url: string,
  ) {}

  /** A proxy on a free loopback port to `target` (`http://HOST:PORT`). */
  static async start(target: string): Promise<CutProxy> {
    const { hostname, port } = new URL(target);
    let proxy: CutProxy | undefined;
    const server = net.createServer((client) => proxy?.carry(client, hostname, Number(port)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address() as net.AddressInfo;
    proxy = new CutProxy(server, `http://127.0.0.1:${address.port}`);
    return proxy;
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
      from.on("data", (chunk) => {
        if (!this.isCut) to.write(chunk);
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
