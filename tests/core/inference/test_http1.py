"""Http1Transport against scripted loopback servers: framing, keep-alive, stale and
broken connections, timeouts, decoding, TLS, and the proxy fallback of generate_text."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import ssl
from collections.abc import Awaitable, Callable

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from refiner_core.inference import OpenAIResponsesProvider, generate_text
from refiner_core.inference.http1 import Http1Transport

from .provider_server import ProviderServer
from .support import FAST_RETRY, OPENAI_KEY, run_rows

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Scripted:
    """A loopback server whose connections run ``handler``; counts connections."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        async def serve(reader, writer):
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    def url(self, path: str = "/v1/x", scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}{path}"


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answer(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"content-length: {len(body)}", *extra, "", ""]
    return "\r\n".join(head).encode() + body


def keep_alive(*answers: bytes) -> Handler:
    """Answer each request on a connection with the next of ``answers`` (cycling)."""

    async def handler(reader, writer):
        index = 0
        while True:
            await read_request(reader)
            writer.write(answers[index % len(answers)])
            index += 1
            await writer.drain()

    return handler


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_keep_alive_reuses_one_connection_and_sends_the_request_whole():
    seen = []

    async def handler(reader, writer):
        while True:
            head, body = await read_request(reader)
            seen.append((head, body))
            writer.write(answer(b'{"ok": true}', "content-type: application/json"))

    async def main():
        async with Scripted(handler) as server:
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                for i in range(3):
                    response = await client.post(server.url("/v1/x?q=1"), json={"i": i})
                    assert response.status_code == 200
                    assert response.json() == {"ok": True}
                    assert response.http_version == "HTTP/1.1"
            return server.connections

    assert run(main()) == 1
    head, body = seen[2]
    assert head.startswith(b"POST /v1/x?q=1 HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in head.lower()
    assert body == b'{"i":2}'


def test_chunked_and_eof_delimited_bodies_are_read_whole():
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"

    async def until_close(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nno length, ends at close")
        await writer.drain()
        writer.close()

    async def main():
        transport = Http1Transport()
        async with httpx.AsyncClient(transport=transport) as client:
            async with Scripted(keep_alive(chunked)) as server:
                first = await client.get(server.url())
                second = await client.get(server.url())
            async with Scripted(until_close) as server:
                third = await client.get(server.url())
        return first.text, second.text, third.text

    assert run(main()) == ("hello world", "hello world", "no length, ends at close")


def test_interim_100_answer_is_skipped():
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"final")

    async def main():
        async with (
            Scripted(keep_alive(interim)) as server,
            httpx.AsyncClient(transport=Http1Transport()) as client,
        ):
            response = await client.post(server.url(), content=b"x")
        return response.status_code, response.text

    assert run(main()) == (200, "final")


def test_gzip_is_decoded_by_httpx_and_by_exchange():
    packed = gzip.compress(b'{"text": "packed"}')
    reply = answer(packed, "content-encoding: gzip")

    async def main():
        async with Scripted(keep_alive(reply)) as server:
            transport = Http1Transport()
            async with httpx.AsyncClient(transport=transport) as client:
                via_client = (await client.get(server.url())).json()
            transport = Http1Transport()
            url = httpx.URL(server.url())
            headers = [(b"host", url.netloc)]
            raw = await transport.exchange("GET", url, headers, b"", {})
            await transport.aclose()
        return via_client, raw.content, raw.encoding

    via_client, content, encoding = run(main())
    assert via_client == {"text": "packed"}
    assert content == b'{"text": "packed"}' and encoding == "gzip"


def test_unasked_encoding_is_a_decoding_error():
    reply = answer(b"\x00\x01", "content-encoding: br")

    async def main():
        async with Scripted(keep_alive(reply)) as server:
            transport = Http1Transport()
            url = httpx.URL(server.url())
            try:
                await transport.exchange("GET", url, [(b"host", url.netloc)], b"", {})
            finally:
                await transport.aclose()

    with pytest.raises(httpx.DecodingError, match="Content-Encoding 'br'"):
        run(main())


def test_connection_close_answer_is_not_reused():
    async def main():
        reply = answer(b"bye", "connection: close")
        async with Scripted(keep_alive(reply)) as server:
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                for _ in range(3):
                    assert (await client.get(server.url())).text == "bye"
            return server.connections

    assert run(main()) == 3


def test_idle_connection_closed_by_the_server_is_replaced_without_an_error():
    async def one_then_close(reader, writer):
        await read_request(reader)
        writer.write(answer(b"once"))  # says nothing about closing, then closes
        await writer.drain()

    async def main():
        async with Scripted(one_then_close) as server:
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                first = await client.get(server.url())
                await asyncio.sleep(0.05)  # the close reaches the client
                second = await client.get(server.url())
                third = await client.get(server.url())  # no pause: may find it stale
            return first.text, second.text, third.text, server.connections

    assert run(main()) == ("once", "once", "once", 3)


def test_request_dropped_unanswered_on_a_reused_connection_is_sent_once_more():
    """The server read the second request on a kept-alive connection and closed it
    without a byte of answer (an idle timeout racing the request): the request goes
    again on a fresh connection instead of failing."""
    requests = []

    async def answer_one_then_drop(reader, writer):
        _, body = await read_request(reader)
        requests.append(body)
        writer.write(answer(b"answered " + body))
        await writer.drain()
        _, body = await read_request(reader)
        requests.append(body)  # read, then dropped unanswered

    async def main():
        async with (
            Scripted(answer_one_then_drop) as server,
            httpx.AsyncClient(transport=Http1Transport()) as client,
        ):
            first = await client.post(server.url(), content=b"1")
            second = await client.post(server.url(), content=b"2")
            return first.text, second.text, server.connections

    assert run(main()) == ("answered 1", "answered 2", 2)
    assert requests == [b"1", b"2", b"2"]


def test_connection_dropped_mid_answer_is_a_protocol_error_not_a_silent_retry():
    async def half(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
        await writer.drain()

    async def main():
        async with Scripted(half) as server:
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                with pytest.raises(httpx.RemoteProtocolError, match="disconnected"):
                    await client.get(server.url())
            return server.connections

    assert run(main()) == 1


def test_garbage_answer_is_a_protocol_error():
    async def garbage(reader, writer):
        await read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async def main():
        async with (
            Scripted(garbage) as server,
            httpx.AsyncClient(transport=Http1Transport()) as client,
        ):
            await client.get(server.url())

    with pytest.raises(httpx.RemoteProtocolError, match="malformed HTTP response"):
        run(main())


def test_read_timeout_closes_the_connection():
    async def slow_first(reader, writer):
        await read_request(reader)
        await asyncio.sleep(2)

    async def main():
        async with Scripted(slow_first) as server:
            timeout = httpx.Timeout(5.0, read=0.2)
            async with httpx.AsyncClient(transport=Http1Transport(), timeout=timeout) as client:
                with pytest.raises(httpx.ReadTimeout, match="within 0.2 s"):
                    await client.get(server.url())
                server.handler = keep_alive(answer(b"fresh"))
                response = await client.get(server.url())
            return response.text, server.connections

    assert run(main()) == ("fresh", 2)


def test_cancelled_request_does_not_leave_its_connection_in_the_pool():
    async def main():
        release = asyncio.Event()

        async def gated(reader, writer):
            while True:
                await read_request(reader)
                await release.wait()
                writer.write(answer(b"late"))
                await writer.drain()

        async with Scripted(gated) as server:
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                pending = asyncio.ensure_future(client.get(server.url()))
                await asyncio.sleep(0.1)
                pending.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await pending
                release.set()
                response = await client.get(server.url())
            return response.text, server.connections

    assert run(main()) == ("late", 2)


def test_refused_connection_names_host_and_port():
    async def main():
        async with Scripted(keep_alive(answer(b""))) as server:
            port = server.port
        async with httpx.AsyncClient(transport=Http1Transport()) as client:
            await client.get(f"http://127.0.0.1:{port}/v1")

    with pytest.raises(httpx.ConnectError, match=r"cannot connect to 127\.0\.0\.1:\d+"):
        run(main())


def test_unsupported_scheme_and_methods():
    async def main():
        async with httpx.AsyncClient(transport=Http1Transport()) as client:
            with pytest.raises(httpx.UnsupportedProtocol, match="HEAD"):
                await client.head("http://127.0.0.1:9/")
            transport = Http1Transport()
            with pytest.raises(httpx.UnsupportedProtocol, match="scheme 'ftp'"):
                await transport.exchange("GET", httpx.URL("ftp://127.0.0.1/x"), [], b"", {})

    run(main())


def self_signed(tmp_path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for 127.0.0.1, and a client context
    that trusts exactly that certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "refiner test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


def test_https_verifies_the_certificate(tmp_path):
    server_tls, client_tls = self_signed(tmp_path)

    async def main():
        async with Scripted(keep_alive(answer(b"secret")), tls=server_tls) as server:
            url = server.url(scheme="https")
            async with httpx.AsyncClient(transport=Http1Transport(ssl_context=client_tls)) as c:
                trusted = [(await c.get(url)).text for _ in range(2)]
            connections = server.connections
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get(url)
        return trusted, connections

    assert run(main()) == (["secret", "secret"], 1)


def test_generate_text_goes_through_an_environment_proxy(monkeypatch):
    """With HTTP_PROXY set for the endpoint, requests take httpx's own transport and
    reach the proxy with the absolute URL (the fake provider plays the proxy)."""
    with ProviderServer(api_key=OPENAI_KEY) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.root_url)
        monkeypatch.setenv("NO_PROXY", "")

        async def fn(row, generate):
            return {"a": (await generate(row["q"])).text}

        generator = generate_text(
            fn=fn,
            provider=OpenAIResponsesProvider(model="gpt-4.1", base_url="http://provider.test/v1"),
            retry=FAST_RETRY,
        )
        rows = run_rows(generator, [{"q": "via proxy"}])

    assert rows == [{"a": "echo: via proxy"}]
    assert [r.path for r in proxy.requests] == ["http://provider.test/v1/responses"]
