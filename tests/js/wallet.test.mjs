// JavaScript wallets read coloco's typed data right: MetaMask's @metamask/eth-sig-util and ethers
// hash and sign the ComputeAttestation and ComputeOffer typed data exactly as Python does
// (protocol/attestation.py, protocol/offer.py).
//
// Run by `make test` (node --test tests/js/). Without COLOCO_WALLET_FIXTURE it checks the golden
// vectors (tests/vectors/compute_attestation.json, read with plain JSON.parse as any JavaScript
// program would); tests/integration/test_wallet_js.py sets COLOCO_WALLET_FIXTURE to the typed data
// a live ledger serves at /v1/eip712 plus a message with uint64 values above 2^53, and reads back
// the signatures written to COLOCO_WALLET_OUT to recover them in Python.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  SignTypedDataVersion,
  TypedDataUtils,
  recoverTypedSignature,
  signTypedData,
} from "@metamask/eth-sig-util";
import { TypedDataEncoder, Wallet, verifyTypedData } from "ethers";

const V4 = SignTypedDataVersion.V4;
const here = dirname(fileURLToPath(import.meta.url));

function hex(bytes) {
  return "0x" + Buffer.from(bytes).toString("hex");
}

function withoutDomainType(types) {
  const { EIP712Domain: _domain, ...rest } = types;
  return rest;
}

function metamask(typed, privateKey) {
  const key = Buffer.from(privateKey.slice(2), "hex");
  return {
    digest: hex(TypedDataUtils.eip712Hash(typed, V4)),
    signature: signTypedData({ privateKey: key, data: typed, version: V4 }),
  };
}

async function viaEthers(typed, privateKey) {
  const types = withoutDomainType(typed.types);
  const wallet = new Wallet(privateKey);
  return {
    digest: TypedDataEncoder.hash(typed.domain, types, typed.message),
    signature: await wallet.signTypedData(typed.domain, types, typed.message),
    signer: wallet.address,
  };
}

const fixturePath = process.env.COLOCO_WALLET_FIXTURE;

if (!fixturePath) {
  const read = (name) => JSON.parse(readFileSync(join(here, "..", "vectors", name), "utf8"));
  // attestations, and the compute market's offers (protocol/offer.py): wallets sign both
  const vectors = [
    ...read("compute_attestation.json"),
    ...read("compute_offer.json").map((v) => ({ ...v, name: `offer ${v.name}` })),
  ];

  test("the golden vectors survive JSON.parse: no integer beyond 2^53 is a JSON number", () => {
    for (const v of vectors) {
      for (const value of [...Object.values(v.typed_data.message), v.typed_data.domain.chainId]) {
        assert.ok(typeof value !== "number" || Number.isSafeInteger(value), `${v.name}: ${value}`);
      }
    }
  });

  for (const v of vectors) {
    test(`eth-sig-util and ethers agree with Python on vector ${v.name}`, async () => {
      const mm = metamask(v.typed_data, v.private_key);
      assert.equal(mm.digest, v.digest);
      assert.equal(mm.signature, v.signature);
      const recovered = recoverTypedSignature({ data: v.typed_data, signature: v.signature, version: V4 });
      assert.equal(recovered.toLowerCase(), v.signer.toLowerCase());

      const eth = await viaEthers(v.typed_data, v.private_key);
      assert.equal(eth.digest, v.digest);
      assert.equal(eth.signature, v.signature);
      const types = withoutDomainType(v.typed_data.types);
      assert.equal(verifyTypedData(v.typed_data.domain, types, v.typed_data.message, v.signature), v.signer);
    });
  }
} else {
  test("the ledger's /v1/eip712 typed data signs the same in eth-sig-util, ethers and Python", async () => {
    const fixture = JSON.parse(readFileSync(fixturePath, "utf8"));
    const typed = { ...fixture.eip712, message: fixture.message };
    const mm = metamask(typed, fixture.private_key);
    const eth = await viaEthers(typed, fixture.private_key);
    assert.equal(mm.digest, fixture.python_digest, "eth-sig-util digest differs from Python's");
    assert.equal(eth.digest, fixture.python_digest, "ethers digest differs from Python's");
    assert.equal(mm.signature, eth.signature);
    const recovered = recoverTypedSignature({ data: typed, signature: mm.signature, version: V4 });
    assert.equal(recovered.toLowerCase(), eth.signer.toLowerCase());
    writeFileSync(
      process.env.COLOCO_WALLET_OUT,
      JSON.stringify({ metamask: mm, ethers: eth, signer: eth.signer }),
    );
  });
}
