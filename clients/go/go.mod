module turnwire.dev/clients/go

go 1.19
