mkdir -p /tmp/fam/assets && cp .device/fam-a1/assets/* /tmp/fam/assets/ && ls -la /tmp/fam/assets
