// What the ABS tests do besides the operator, through Azure's own client: create a container,
// list blobs, download one with its metadata. Azurite's well-known development account.
//   AZURITE_URL=http://HOST:PORT/devstoreaccount1 node hack/azurite-client.cjs container NAME
//   ... list CONTAINER PREFIX            one blob name per line
//   ... get CONTAINER BLOB FILE          writes FILE, prints {"size":..,"metadata":{..}}
// NODE_PATH must name the node_modules that hack/deps.sh installed.
const { BlobServiceClient, StorageSharedKeyCredential } = require("@azure/storage-blob");

const account = "devstoreaccount1";
const key =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const service = new BlobServiceClient(
  process.env.AZURITE_URL,
  new StorageSharedKeyCredential(account, key),
);

async function main([command, container, name, file]) {
  const c = service.getContainerClient(container);
  switch (command) {
    case "container":
      await c.createIfNotExists();
      break;
    case "list":
      for await (const blob of c.listBlobsFlat({ prefix: name })) console.log(blob.name);
      break;
    case "get": {
      const blob = c.getBlobClient(name);
      await blob.downloadToFile(file);
      const p = await blob.getProperties();
      console.log(JSON.stringify({ size: p.contentLength, metadata: p.metadata }));
      break;
    }
    default:
      throw new Error(`unknown command ${command}`);
  }
}

main(process.argv.slice(2)).catch((e) => {
  console.error(e.message);
  process.exit(1);
});
