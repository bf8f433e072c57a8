"""Network: VPC, subnets from the spec, internet + NAT gateways, routes and an S3 gateway endpoint."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from clusterforge.aws import layout
from clusterforge.clusterspec.models import Cluster
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags


@dataclass(frozen=True)
class SubnetArgs:
    name: str
    cidr: str
    availability_zone: str
    public: bool


@dataclass(frozen=True)
class NetworkArgs:
    cluster: str
    region: str
    vpc_cidr: str
    subnets: tuple[SubnetArgs, ...]
    #: availability zone -> name of the public subnet that holds its NAT gateway
    nat_subnets: tuple[tuple[str, str], ...]

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> NetworkArgs:
        spec = layout.aws_section(cluster)
        return cls(
            cluster=cluster.name,
            region=spec.region,
            vpc_cidr=spec.vpc_cidr,
            subnets=tuple(SubnetArgs(s.name, s.cidr, s.availability_zone, s.public) for s in spec.subnets),
            nat_subnets=tuple((az, s.name) for az, s in layout.nat_subnets(spec).items()),
        )


class Network(pulumi.ComponentResource):
    """The cluster's VPC. Compute nodes live in private subnets and reach the internet (package
    mirrors, NGC, PyPI) through a NAT gateway per AZ; S3 traffic bypasses the NAT through a free
    gateway endpoint, which matters when a training job streams terabytes from S3."""

    vpc: aws.ec2.Vpc
    subnets: dict[str, aws.ec2.Subnet]
    route_tables: list[aws.ec2.RouteTable]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Network", name, None, opts)
        tags = cluster_tags(args.cluster)

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            # Instances resolve each other (and the FSx/EFS DNS names) through the VPC resolver.
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=cluster_tags(args.cluster, {"Name": args.cluster}),
            opts=child_opts(self),
        )
        self.subnets = {
            s.name: aws.ec2.Subnet(
                f"{name}-{s.name}",
                vpc_id=self.vpc.id,
                cidr_block=s.cidr,
                availability_zone=s.availability_zone,
                # Never auto-assign public IPs, even in public subnets: only a login node that is
                # meant to be reachable asks for one explicitly.
                map_public_ip_on_launch=False,
                tags=cluster_tags(args.cluster, {"Name": f"{args.cluster}-{s.name}"}),
                opts=child_opts(self),
            )
            for s in args.subnets
        }
        self.route_tables = []

        public = [s for s in args.subnets if s.public]
        self.internet_gateway: aws.ec2.InternetGateway | None = None
        if public:
            self.internet_gateway = aws.ec2.InternetGateway(
                f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child_opts(self)
            )
            public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id, tags=tags, opts=child_opts(self))
            aws.ec2.Route(
                f"{name}-public-default",
                route_table_id=public_rt.id,
                destination_cidr_block="0.0.0.0/0",
                gateway_id=self.internet_gateway.id,
                opts=child_opts(self),
            )
            for s in public:
                aws.ec2.RouteTableAssociation(
                    f"{name}-{s.name}-rt",
                    subnet_id=self.subnets[s.name].id,
                    route_table_id=public_rt.id,
                    opts=child_opts(self),
                )
            self.route_tables.append(public_rt)

        # One private route table per AZ, so each AZ's default route uses its own NAT gateway.
        self.nat_gateways: dict[str, aws.ec2.NatGateway] = {}
        for az, nat_subnet in args.nat_subnets:
            eip = aws.ec2.Eip(f"{name}-nat-{az}", domain="vpc", tags=tags, opts=child_opts(self))
            self.nat_gateways[az] = aws.ec2.NatGateway(
                f"{name}-nat-{az}",
                allocation_id=eip.id,
                subnet_id=self.subnets[nat_subnet].id,
                tags=tags,
                # The NAT gateway needs the internet gateway attached before it can route.
                opts=child_opts(self, pulumi.ResourceOptions(depends_on=[self.internet_gateway]))
                if self.internet_gateway
                else child_opts(self),
            )
        private_azs: list[str] = []
        for s in args.subnets:
            if not s.public and s.availability_zone not in private_azs:
                private_azs.append(s.availability_zone)
        for az in private_azs:
            rt = aws.ec2.RouteTable(f"{name}-private-{az}", vpc_id=self.vpc.id, tags=tags, opts=child_opts(self))
            if az in self.nat_gateways:
                aws.ec2.Route(
                    f"{name}-private-{az}-default",
                    route_table_id=rt.id,
                    destination_cidr_block="0.0.0.0/0",
                    nat_gateway_id=self.nat_gateways[az].id,
                    opts=child_opts(self),
                )
            for s in args.subnets:
                if not s.public and s.availability_zone == az:
                    aws.ec2.RouteTableAssociation(
                        f"{name}-{s.name}-rt",
                        subnet_id=self.subnets[s.name].id,
                        route_table_id=rt.id,
                        opts=child_opts(self),
                    )
            self.route_tables.append(rt)

        self.s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=layout.s3_gateway_service(args.region),
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in self.route_tables],
            tags=tags,
            opts=child_opts(self),
        )

        self.register_outputs(
            {
                "vpc_id": self.vpc.id,
                "subnet_ids": {k: v.id for k, v in self.subnets.items()},
            }
        )
