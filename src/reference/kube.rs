//! The gate's look at the world: Services, EndpointSlices and pods of the namespace asking
//! (the reads the operator's Role grants there: lists, by name and by address), and DNS for
//! names outside the cluster.

use std::net::IpAddr;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;

use super::{Dial, Refused, Resolve, ServiceFacts};

/// The API server's addresses as this process reaches it, set once at start.
static API_SERVER: OnceLock<Vec<IpAddr>> = OnceLock::new();

/// Records the API server's addresses: the `kubernetes` Service's (in a pod) and the host
/// of the URL the client uses, when it is an address.
pub fn set_api_server(cluster_url_host: Option<&str>) {
    let mut ips: Vec<IpAddr> = std::env::var("KUBERNETES_SERVICE_HOST")
        .ok()
        .and_then(|h| h.parse().ok())
        .into_iter()
        .collect();
    if let Some(ip) = cluster_url_host
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
    {
        ips.push(ip.to_canonical());
    }
    let _ = API_SERVER.set(ips);
}

/// [`Resolve`] through the API server and the operator pod's resolver.
pub struct KubeResolver {
    client: kube::Client,
}

impl KubeResolver {
    pub fn new(client: &kube::Client) -> Self {
        KubeResolver {
            client: client.clone(),
        }
    }
}

/// Authorizes the etcd client URLs `urls` of `field` of an object in namespace `ns`, under
/// this process's policy, through the API server `client` reaches.
pub async fn authorize(
    client: &kube::Client,
    ns: &str,
    field: &str,
    urls: &[String],
) -> Result<Vec<Dial>, Refused> {
    let resolver = KubeResolver::new(client);
    super::etcd_urls(&resolver, &super::policy(), ns, field, urls).await
}

fn text(e: kube::Error) -> String {
    e.to_string()
}

impl Resolve for KubeResolver {
    async fn service(&self, ns: &str, name: &str) -> Result<Option<ServiceFacts>, String> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), ns);
        let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
        let Some(service) = services.list(&by_name).await.map_err(text)?.items.pop() else {
            return Ok(None);
        };
        let spec = service.spec.unwrap_or_default();
        let external_name = (spec.type_.as_deref() == Some("ExternalName"))
            .then(|| spec.external_name.unwrap_or_default());
        let selects_pods = spec.selector.is_some_and(|s| !s.is_empty());
        let mut endpoint_ips = Vec::new();
        if external_name.is_none() && !selects_pods {
            let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
            let of = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
            for slice in slices.list(&of).await.map_err(text)?.items {
                for endpoint in slice.endpoints {
                    // An address that does not parse is an FQDN endpoint: judged as such, it
                    // could be anything; refused by standing for the unspecified address.
                    endpoint_ips.extend(
                        endpoint
                            .addresses
                            .iter()
                            .map(|a| a.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
                    );
                }
            }
        }
        Ok(Some(ServiceFacts {
            external_name,
            selects_pods,
            endpoint_ips,
        }))
    }

    async fn pod_in(&self, ns: &str, ip: IpAddr) -> Result<bool, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let at = ListParams::default()
            .fields(&format!("status.podIP={ip}"))
            .limit(1);
        Ok(!pods
            .list_metadata(&at)
            .await
            .map_err(text)?
            .items
            .is_empty())
    }

    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        // A rooted name: the pod's search path would otherwise try the cluster's own domains
        // first, and a name judged as outside the cluster could resolve inside it.
        let rooted = format!("{name}.:0");
        let found = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio::net::lookup_host(rooted),
        )
        .await
        .map_err(|_| "DNS did not answer within 5 s".to_string())?
        .map_err(|e| e.to_string())?;
        let mut ips: Vec<IpAddr> = found.map(|a| a.ip().to_canonical()).collect();
        ips.sort();
        ips.dedup();
        Ok(ips)
    }

    fn api_server(&self) -> Vec<IpAddr> {
        API_SERVER.get().cloned().unwrap_or_default()
    }
}
